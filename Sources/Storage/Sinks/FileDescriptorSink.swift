#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Machines
import Transfer
import SystemCalls

/// Writes each message's bytes to a file descriptor (standard output by default), exactly as received: no newline
/// added, nothing between consecutive messages. Partial writes and `EINTR` are retried; a closed pipe (`EPIPE`) or
/// any other error ends the run with `.ioError`. SIGPIPE is ignored by the command, so a closed pipe is an error, not
/// a kill.
///
/// A terminal is the exception: a message is shown there, not stored, and a peer's escape sequences must not drive
/// it, so control characters are written as visible escapes (``SafeText``, line feeds and tabs kept) and bytes that
/// are not UTF-8 as U+FFFD. A pipe or a file gets the bytes exactly.
package struct FileDescriptorSink: MessageSink {
    package let fileDescriptor: Int32
    package let name: String
    package let escapesForTerminal: Bool

    package init(fileDescriptor: Int32 = STDOUT_FILENO, name: String = "standard output", escapesForTerminal: Bool? = nil) {
        self.fileDescriptor = fileDescriptor
        self.name = name
        self.escapesForTerminal = escapesForTerminal ?? (isatty(fileDescriptor) == 1)
    }

    /// Writes on ``BlockingCalls/waits``' thread: a reader that stops reading blocks the write (or, non-blocking, the
    /// wait for room) as long as it likes, and must not hold a cooperative-pool thread, nor a storage call, meanwhile.
    package func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let body = message.body
        guard body.file != nil else {
            let bytes = escapesForTerminal ? Self.terminalBytes(message.payload) : message.payload
            try await BlockingCalls.waits.run { () throws(SinkFailure) in try Self.writeAll(bytes, to: fileDescriptor, name: name) }
            return nil
        }
        // A message held in a file (framed, any size, verified whole): copied piece by piece, in constant memory.
        try await BlockingCalls.waits.run { () throws(SinkFailure) in
            var offset = 0
            var carried: [UInt8] = []
            while offset < body.count {
                let piece: [UInt8]
                do {
                    piece = try body.bytes(in: offset..<min(body.count, offset + (1 << 20)))
                } catch { throw SinkFailure(.ioError, "cannot read back the message for \(name): \(error)") }
                offset += piece.count
                if escapesForTerminal {
                    // Escaped whole characters only: a UTF-8 sequence cut at the piece's end waits for the next piece.
                    let (whole, rest) = Self.splitAtCharacterBoundary(carried + piece, final: offset >= body.count)
                    carried = rest
                    try Self.writeAll(Self.terminalBytes(whole), to: fileDescriptor, name: name)
                } else { try Self.writeAll(piece, to: fileDescriptor, name: name) }
            }
        }
        return nil
    }

    /// Large framed messages come into an unnamed temporary file (`MessageInput`'s holding directory), written as they
    /// arrive, and are copied out once verified: no size costs memory, and nothing unverified reaches the descriptor.
    package var partialPayloadStore: (any PartialPayloadStore)? { HeldPartialFiles(directory: MessageInput.holdingDirectory()) }

    /// The holding directory keeps the default reserve free (`--reserve`'s default), as an output directory does: a
    /// framed message announced too large is refused before it comes, one eating into it midway at its next write.
    package func admissionRefusal(announced: Int) -> StorageRefusal? { writeRefusal(announced: announced, received: 0) }

    package func writeRefusal(announced: Int?, received: Int) -> StorageRefusal? {
        guard let announced, UInt64(max(0, announced)) >= OutputDirectory.partialFileThreshold else { return nil }
        return StorageLimits.default.writeRefusal(at: MessageInput.holdingDirectory(), announced: announced, received: received)
    }

    /// `bytes` cut before a UTF-8 sequence its end leaves unfinished (at most 3 bytes kept back), unless `final`.
    static func splitAtCharacterBoundary(_ bytes: [UInt8], final: Bool) -> (whole: [UInt8], rest: [UInt8]) {
        guard !final else { return (bytes, []) }
        var start = bytes.count
        // Back over continuation bytes to the start of the last sequence.
        while start > 0, bytes.count - start < 3, bytes[start - 1] & 0xC0 == 0x80 { start -= 1 }
        guard start > 0 else { return (bytes, []) }
        let lead = bytes[start - 1]
        let length = lead & 0x80 == 0 ? 1 : lead & 0xE0 == 0xC0 ? 2 : lead & 0xF0 == 0xE0 ? 3 : lead & 0xF8 == 0xF0 ? 4 : 1
        let have = bytes.count - (start - 1)
        return have < length ? (Array(bytes[..<(start - 1)]), Array(bytes[(start - 1)...])) : (bytes, [])
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
            case .completed(let written): offset += written
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

/// Partial files for messages of 256 KiB or more, in `directory`, unlinked at once: gone with the process.
struct HeldPartialFiles: PartialPayloadStore {
    let directory: String
    var threshold: UInt64 = OutputDirectory.partialFileThreshold

    func makePartialFile(length: UInt64) throws(PayloadReadError) -> PayloadFile? {
        guard length >= threshold else { return nil }
        var template = Array((directory + "/.bletransfer-partial-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else {
            throw PayloadReadError("cannot create a partial file in '\(directory)': \(String(cString: strerror(errno)))"
                + "; set TMPDIR to a directory with room")
        }
        _ = unlink(template)  // the NUL-terminated name mkstemp filled in
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        return PayloadFile(descriptor: fd, path: directory + " (a message arriving)")
    }
}
