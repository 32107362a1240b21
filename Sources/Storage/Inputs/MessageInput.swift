import SystemCalls
import Foundation
import Machines
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where `send` takes its message from, and how: binary-safe, within the transfer limit, failing in one line.
package enum MessageInput: Sendable, Equatable {
    /// The MESSAGE argument, sent as its UTF-8 bytes.
    case argument(String)
    /// `--file PATH`: a regular file, or anything readable (a FIFO, `/dev/stdin`, `<(cmd)`).
    case file(String)
    /// Standard input, read to its end.
    case standardInput

    package struct Failure: ClassifiedFailure, Equatable, CustomStringConvertible {
        package var kind: FailureKind
        package var userMessage: String
        package var description: String { userMessage }
    }

    /// Reads the whole message and, when `sendsName` and the input is `--file PATH` of a regular file, attaches the
    /// file's name (the last component of PATH) and modification time. A FIFO or `/dev/stdin` has no name worth
    /// keeping (`63` for `<(cmd)`), nor has an argument or standard input.
    /// - Parameters:
    ///   - limit: the largest payload allowed (``TransferLimits/maximumMessageSize``); larger
    ///     input fails with `.dataError` without being read past the limit.
    ///   - allowEmpty: an empty message is refused (`.dataError`) unless this is set: an empty
    ///     stdin or file is far more often a mistake (a failed command in a pipe) than intent.
    ///   - standardInput: the descriptor to read for `.standardInput` (tests pass a pipe).
    package func readMessage(limit: Int, allowEmpty: Bool, sendsName: Bool,
                            standardInput: FileDescriptor = .standardInput) throws(Failure) -> OutgoingMessage {
        let bytes: [UInt8]
        switch self {
        case .argument(let text):
            bytes = Array(text.utf8)
            if bytes.count > limit {
                throw Failure(kind: .dataError, userMessage:
                    "the message is too large (\(bytes.count) bytes): the limit is \(limit) bytes (\(limit / (1024 * 1024)) MiB)")
            }
        case .file(let path):
            var named = stat()
            if stat(path, &named) == 0, named.st_mode & S_IFMT == S_IFREG {
                return try Self.streamedFile(path, allowEmpty: allowEmpty, sendsName: sendsName, source: sourceDescription)
            }
            // A FIFO, `<(cmd)`, a device: held in a temporary file, any size, as standard input is.
            let descriptor = try Self.openForReading(path)
            defer { try? descriptor.close() }
            return try Self.spooled(descriptor, what: "'\(path)'", allowEmpty: allowEmpty, source: sourceDescription)
        case .standardInput:
            if isatty(standardInput.rawValue) == 1 {
                throw Failure(kind: .usage, userMessage:
                    "nothing to send: give the message as an argument, use --file PATH, or pipe it into standard input")
            }
            return try Self.spooled(standardInput, what: "standard input", allowEmpty: allowEmpty, source: sourceDescription)
        }
        if bytes.isEmpty && !allowEmpty { throw Self.empty(sourceDescription) }
        return OutgoingMessage(payload: bytes)
    }

    var sourceDescription: String {
        switch self {
        case .argument: "the MESSAGE argument"
        case .file(let path): "'\(path)'"
        case .standardInput: "standard input"
        }
    }

    /// A regular file, sent from disk as it goes (any size, constant memory; its SHA-256 taken first in one pass).
    private static func streamedFile(_ path: String, allowEmpty: Bool, sendsName: Bool,
                                     source: String) throws(Failure) -> OutgoingMessage {
        let message: OutgoingMessage
        let status: stat
        do {
            (message, status) = try OutgoingMessage.ofFile(at: path)
        } catch { throw Failure(kind: .noInput, userMessage: error.description) }
        if message.byteCount == 0 && !allowEmpty { throw empty(source) }
        guard sendsName, let name = FilePath(path).lastComponent?.string else { return message }
        let file = SentFileAttributes(name: name, modificationSeconds: Int64(status.st_mtim.tv_sec),
                                      modificationNanoseconds: UInt32(clamping: status.st_mtim.tv_nsec))
        return OutgoingMessage(body: message.body, digest: message.digest, file: file)
    }

    /// `path` open for reading (a FIFO, a device; a regular file goes `streamedFile`'s way).
    private static func openForReading(_ path: String) throws(Failure) -> FileDescriptor {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.open(FilePath(path), .readOnly, options: [.closeOnExec])
        } catch { throw Failure(kind: .noInput, userMessage: "cannot open '\(path)': \(describe(error))") }
        var status = stat()
        if fstat(descriptor.rawValue, &status) == 0, (status.st_mode & S_IFMT) == S_IFDIR {
            try? descriptor.close()
            throw Failure(kind: .noInput, userMessage: "'\(path)' is a directory, not a file")
        }
        return descriptor
    }

    /// Where a stream is held while sent: `$TMPDIR`, else `/var/tmp` (on disk where `/tmp` may be memory), else `/tmp`.
    package static func holdingDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let directory = environment["TMPDIR"], directory.hasPrefix("/") { return directory }
        return access("/var/tmp", W_OK | X_OK) == 0 ? "/var/tmp" : "/tmp"
    }

    /// A stream (standard input, a FIFO) read to its end into an unnamed temporary file piece by piece: any size, in
    /// constant memory, then sent from it as a regular file is (the protocol announces length and SHA-256 before the
    /// first byte, so the stream must be whole first). Unlinked at once: nothing is left behind, whatever ends the run.
    static func spooled(_ descriptor: FileDescriptor, what: String, allowEmpty: Bool, source: String,
                        directory: String = holdingDirectory()) throws(Failure) -> OutgoingMessage {
        var template = Array((directory + "/.bletransfer-stdin-XXXXXX").utf8CString)
        let held = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard held >= 0 else {
            throw Failure(kind: .ioError, userMessage: "cannot hold \(what) in \(directory): \(String(cString: strerror(errno)))"
                + "; set TMPDIR to a directory with room")
        }
        _ = unlink(template)  // the NUL-terminated name mkstemp filled in
        let file = FileDescriptor(rawValue: held)
        var total = 0
        var chunk = [UInt8](repeating: 0, count: 1 << 20)
        do {
            while true {
                let count: Int
                do {
                    count = try chunk.withUnsafeMutableBytes { try descriptor.read(into: $0, retryOnInterrupt: true) }
                } catch {
                    // EISDIR arrives here when a directory is given as standard input.
                    throw Failure(kind: .noInput, userMessage: "cannot read \(what): \(describe(error))")
                }
                if count == 0 { break }
                do {
                    _ = try file.writeAll(chunk[0..<count])
                } catch {
                    throw Failure(kind: .ioError, userMessage: "cannot hold \(what) in \(directory): \(describe(error))"
                        + "; set TMPDIR to a directory with room")
                }
                total += count
            }
        } catch {
            try? file.close()
            throw error as? Failure ?? Failure(kind: .ioError, userMessage: "cannot read \(what): \(error)")
        }
        if total == 0 && !allowEmpty {
            try? file.close()
            throw empty(source)
        }
        let body = MessagePayload(file: PayloadFile(descriptor: held, path: what), count: total)
        do {
            return OutgoingMessage(body: body, digest: try body.sha256())
        } catch { throw Failure(kind: .ioError, userMessage: "cannot read back \(what) from \(directory): \(error)") }
    }

    /// An empty message, refused without `--allow-empty`: far more often a mistake (a failed command in a pipe).
    private static func empty(_ source: String) -> Failure {
        Failure(kind: .dataError, userMessage: "the message is empty (\(source) gave 0 bytes); pass --allow-empty to send an empty message")
    }

    private static func describe(_ error: any Error) -> String {
        if let errno = error as? Errno {
            switch errno {
            case .noSuchFileOrDirectory: return "no such file"
            case .permissionDenied: return "permission denied"
            case .isDirectory: return "it is a directory"
            default: return String(describing: errno)
            }
        }
        return String(describing: error)
    }
}
