import Machines
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Where `send` takes its message from, and the rules for reading it: binary-safe, bounded by
/// the transfer limit, with one-line failures a user can act on.
package enum MessageInput: Sendable, Equatable {
    /// The MESSAGE argument, sent as its UTF-8 bytes.
    case argument(String)
    /// `--file PATH`: a regular file, or anything readable (a FIFO, `/dev/stdin`, `<(cmd)`).
    case file(String)
    /// Standard input, read to its end.
    case standardInput

    /// Why the message could not be read.
    package struct Failure: ClassifiedFailure, Equatable, CustomStringConvertible {
        package var kind: FailureKind
        package var userMessage: String
        package var description: String { userMessage }
    }

    /// Reads the whole message.
    /// - Parameters:
    ///   - limit: the largest payload allowed (``TransferLimits/maximumMessageSize``); larger
    ///     input fails with `.dataError` without being read past the limit.
    ///   - allowEmpty: an empty message is refused (`.dataError`) unless this is set: an empty
    ///     stdin or file is far more often a mistake (a failed command in a pipe) than intent.
    ///   - standardInput: the descriptor to read for `.standardInput` (tests pass a pipe).
    package func read(limit: Int, allowEmpty: Bool,
                     standardInput: FileDescriptor = .standardInput) throws(Failure) -> [UInt8] {
        try readMessage(limit: limit, allowEmpty: allowEmpty, sendsName: false, standardInput: standardInput).payload
    }

    /// Reads the whole message (as ``read(limit:allowEmpty:standardInput:)``) and, when
    /// `sendsName` and the input is `--file PATH` of a regular file, attaches the file's name
    /// (the last component of PATH) and modification time. A FIFO or `/dev/stdin` has no name
    /// worth keeping (`63` for `<(cmd)`), nor has an argument or standard input.
    package func readMessage(limit: Int, allowEmpty: Bool, sendsName: Bool,
                            standardInput: FileDescriptor = .standardInput) throws(Failure) -> OutgoingMessage {
        let bytes: [UInt8]
        var file: SentFileAttributes?
        switch self {
        case .argument(let text):
            bytes = Array(text.utf8)
            if bytes.count > limit { throw Self.tooLarge(bytes.count, limit: limit, what: "the message") }
        case .file(let path):
            var named = stat()
            if stat(path, &named) == 0, named.st_mode & S_IFMT == S_IFREG {
                return try Self.streamedFile(path, allowEmpty: allowEmpty, sendsName: sendsName, source: sourceDescription)
            }
            let status: stat?
            (bytes, status) = try Self.readFile(path, limit: limit)
            if sendsName, let status, (status.st_mode & S_IFMT) == S_IFREG,
               let name = FilePath(path).lastComponent?.string {
                file = SentFileAttributes(name: name, modificationSeconds: Int64(status.st_mtim.tv_sec),
                                          modificationNanoseconds: UInt32(clamping: status.st_mtim.tv_nsec))
            }
        case .standardInput:
            if isatty(standardInput.rawValue) == 1 {
                throw Failure(kind: .usage, userMessage:
                    "nothing to send: give the message as an argument, use --file PATH, or pipe it into standard input")
            }
            bytes = try Self.readAll(standardInput, limit: limit, what: "standard input")
        }
        if bytes.isEmpty && !allowEmpty {
            throw Failure(kind: .dataError, userMessage:
                "the message is empty (\(self.sourceDescription) gave 0 bytes); pass --allow-empty to send an empty message")
        }
        return OutgoingMessage(payload: bytes, file: file)
    }

    var sourceDescription: String {
        switch self {
        case .argument: "the MESSAGE argument"
        case .file(let path): "'\(path)'"
        case .standardInput: "standard input"
        }
    }

    /// A regular file, sent from disk as it goes (any size, constant memory; its SHA-256 is
    /// taken first, in one pass over it).
    private static func streamedFile(_ path: String, allowEmpty: Bool, sendsName: Bool,
                                     source: String) throws(Failure) -> OutgoingMessage {
        let message: OutgoingMessage
        let status: stat
        do {
            (message, status) = try OutgoingMessage.ofFile(at: path)
        } catch {
            throw Failure(kind: .noInput, userMessage: error.description)
        }
        if message.byteCount == 0 && !allowEmpty {
            throw Failure(kind: .dataError, userMessage:
                "the message is empty (\(source) gave 0 bytes); pass --allow-empty to send an empty message")
        }
        guard sendsName, let name = FilePath(path).lastComponent?.string else { return message }
        let file = SentFileAttributes(name: name, modificationSeconds: Int64(status.st_mtim.tv_sec),
                                      modificationNanoseconds: UInt32(clamping: status.st_mtim.tv_nsec))
        return OutgoingMessage(body: message.body, digest: message.digest, file: file)
    }

    /// The bytes and, when `fstat` worked, the status of the file they were read from (the
    /// modification time is taken after reading: the one of the bytes sent).
    private static func readFile(_ path: String, limit: Int) throws(Failure) -> ([UInt8], stat?) {
        let descriptor: FileDescriptor
        do {
            descriptor = try FileDescriptor.open(FilePath(path), .readOnly, options: [.closeOnExec])
        } catch {
            throw Failure(kind: .noInput, userMessage: "cannot open '\(path)': \(describe(error))")
        }
        defer { try? descriptor.close() }
        var status = stat()
        if fstat(descriptor.rawValue, &status) == 0 {
            if (status.st_mode & S_IFMT) == S_IFDIR {
                throw Failure(kind: .noInput, userMessage: "'\(path)' is a directory, not a file")
            }
            if (status.st_mode & S_IFMT) == S_IFREG && Int(status.st_size) > limit {
                throw tooLarge(Int(status.st_size), limit: limit, what: "'\(path)'")
            }
        }
        let bytes = try readAll(descriptor, limit: limit, what: "'\(path)'")
        var after = stat()
        return (bytes, fstat(descriptor.rawValue, &after) == 0 ? after : nil)
    }

    /// Reads to end of file, at most `limit` bytes (one more tells that the input is larger).
    private static func readAll(_ descriptor: FileDescriptor, limit: Int, what: String) throws(Failure) -> [UInt8] {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count: Int
            do {
                count = try chunk.withUnsafeMutableBytes { buffer in
                    try descriptor.read(into: buffer, retryOnInterrupt: true)
                }
            } catch {
                // EISDIR arrives here when a directory is given as standard input.
                throw Failure(kind: .noInput, userMessage: "cannot read \(what): \(describe(error))")
            }
            if count == 0 { return bytes }
            if bytes.count + count > limit {
                throw tooLarge(nil, limit: limit, what: what)
            }
            bytes.append(contentsOf: chunk[0..<count])
        }
    }

    private static func tooLarge(_ size: Int?, limit: Int, what: String) -> Failure {
        let sizeText = size.map { " (\($0) bytes)" } ?? ""
        return Failure(kind: .dataError, userMessage:
            "\(what) is too large\(sizeText): the limit is \(limit) bytes (\(limit / (1024 * 1024)) MiB)")
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
