#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Machines
import Transfer
import SystemCalls

/// Writes each message's bytes to a file descriptor (standard output by default), exactly as
/// received: no newline added, nothing between consecutive messages. Partial writes and
/// `EINTR` are retried; a closed pipe (`EPIPE`) or any other error ends the run with
/// `.ioError`. SIGPIPE is ignored by the command, so a closed pipe is an error, not a kill.
///
/// A terminal is the exception: a message is shown there, not stored, and a peer's escape
/// sequences must not drive it, so control characters are written as visible escapes
/// (``SafeText``, line feeds and tabs kept) and bytes that are not UTF-8 as U+FFFD. A pipe or
/// a file gets the bytes exactly.
package struct FileDescriptorSink: MessageSink {
    package let fileDescriptor: Int32
    package let name: String
    package let escapesForTerminal: Bool

    package init(fileDescriptor: Int32 = STDOUT_FILENO, name: String = "standard output", escapesForTerminal: Bool? = nil) {
        self.fileDescriptor = fileDescriptor
        self.name = name
        self.escapesForTerminal = escapesForTerminal ?? (isatty(fileDescriptor) == 1)
    }

    /// Writes on ``BlockingCalls/waits``' thread: a reader that stops reading blocks the write
    /// (or, on a non-blocking descriptor, the wait for room) for as long as it likes, and must
    /// not hold a thread of the cooperative pool, nor one of the storage calls, meanwhile.
    package func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let bytes = escapesForTerminal ? Self.terminalBytes(message.payload) : message.payload
        let (fileDescriptor, name) = (fileDescriptor, name)
        try await BlockingCalls.waits.run { () throws(SinkFailure) in try Self.writeAll(bytes, to: fileDescriptor, name: name) }
        return nil
    }

    /// What a terminal is shown of `payload`.
    static func terminalBytes(_ payload: [UInt8]) -> [UInt8] {
        Array(SafeText.escape(String(decoding: payload, as: UTF8.self), keepingLineBreaks: true).utf8)
    }

    /// Blocks until the reader took all of `bytes`.
    static func writeAll(_ bytes: [UInt8], to fd: Int32, name: String) throws(SinkFailure) {
        var offset = 0
        while offset < bytes.count {
            let outcome = retryingInterrupts {
                bytes.withUnsafeBytes { buffer in write(fd, buffer.baseAddress! + offset, buffer.count - offset) }
            }
            switch outcome {
            case .completed(let written):
                offset += written
            case .wouldBlock:
                // A non-blocking descriptor (a terminal or pipe someone else set up): wait
                // until it takes more instead of dropping bytes.
                var descriptor = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
                _ = retryingInterrupts { Int(poll(&descriptor, 1, -1)) }
            case .failed(.brokenPipe):
                throw SinkFailure(.ioError, "cannot write the message to \(name): the reader went away (broken pipe)")
            case .failed(let error):
                throw SinkFailure(.ioError, "cannot write the message to \(name): \(error.description)")
            }
        }
    }
}
