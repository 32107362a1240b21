#if canImport(Glibc)
import Glibc
#endif
import Transfer

/// Writes each message's bytes to a file descriptor (standard output by default), exactly as
/// received: no newline added, nothing between consecutive messages. Partial writes and
/// `EINTR` are retried; a closed pipe (`EPIPE`) or any other error ends the run with
/// `.ioError`. SIGPIPE is ignored by the command, so a closed pipe is an error, not a kill.
public struct FileDescriptorSink: MessageSink {
    public let fileDescriptor: Int32
    public let name: String

    public init(fileDescriptor: Int32 = STDOUT_FILENO, name: String = "standard output") {
        self.fileDescriptor = fileDescriptor
        self.name = name
    }

    public func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        try Self.writeAll(message.payload, to: fileDescriptor, name: name)
        return nil
    }

    static func writeAll(_ bytes: [UInt8], to fd: Int32, name: String) throws(SinkFailure) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { buffer in
                write(fd, buffer.baseAddress! + offset, buffer.count - offset)
            }
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    // A non-blocking descriptor (a terminal or pipe someone else set up): wait
                    // until it takes more instead of dropping bytes.
                    var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                    _ = poll(&descriptor, 1, -1)
                    continue
                }
                if code == EPIPE {
                    throw SinkFailure(.ioError, "cannot write the message to \(name): the reader went away (broken pipe)")
                }
                throw SinkFailure(.ioError, "cannot write the message to \(name): \(String(cString: strerror(code)))")
            }
            offset += written
        }
    }
}
