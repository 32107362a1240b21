import Foundation
import Machines
import SystemCalls
import SystemPackage
import Transfer

/// Writes each message to its own new file in a directory (`--output-dir DIR`), through ``OutputDirectory``: atomic,
/// never replacing a file. A message that came with a file name (secure mode, `meta`) is stored under that name,
/// sanitized and numbered when taken, with the sender's modification time; others get names that say when and what:
/// `message-20250101-120000-1.txt` for UTF-8 text, `.bin` otherwise.
package struct OutputDirectorySink: OutputDirectoryBackedSink {
    package let directory: OutputDirectory
    package let limits: StorageLimits
    /// The resume spool's copy of a framed message, counted against the reserve.
    package let spooledCopy: SpooledCopy?

    package init(path: FilePath, limits: StorageLimits = .default, resumeSpool: ResumeSpool? = nil) throws(SinkFailure) {
        self.limits = limits
        spooledCopy = SpooledCopy(resumeSpool, beside: path.string)
        do {
            directory = try OutputDirectory(path: path)
        } catch { throw Self.failure(error) }
    }

    /// Statuses as documented: 73 a directory not makeable (or a file in its place), 77 one not writable, 74 the rest.
    package static func failure(_ error: OutputDirectoryError) -> SinkFailure {
        let kind: FailureKind = switch error {
        case .notADirectory, .cannotCreate: .cannotCreate
        case .notWritable: .permissionDenied
        default: .ioError
        }
        return SinkFailure(kind, "--output-dir: \(error)")
    }

    /// ``OutputDirectory/precheck(_:)`` as the command line reports it, before Bluetooth.
    package static func precheck(_ path: FilePath) throws(SinkFailure) {
        do { try OutputDirectory.precheck(path) } catch { throw failure(error) }
    }

    package func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let generated = Self.fileName(sequence: sequence, isText: message.text != nil, date: Date())
        do {
            return try await directory.store(message, generatedName: generated).string
        } catch {
            // One message that cannot be stored is refused, not the end of the run.
            throw MessageRefused(reason: "\(error)")
        }
    }

    static func fileName(sequence: Int, isText: Bool, date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        return "message-\(formatter.string(from: date))-\(sequence).\(isText ? "txt" : "bin")"
    }
}

/// A sink storing into an ``OutputDirectory`` under `limits`, with the resume spool's copy of a framed message
/// (`spooledCopy`) counted against the reserve: `receive --output-dir`'s and the receiver daemon's.
package protocol OutputDirectoryBackedSink: MessageSink {
    var directory: OutputDirectory { get }
    var limits: StorageLimits { get }
    var spooledCopy: SpooledCopy? { get }
}

extension OutputDirectoryBackedSink {
    package func admissionRefusal(byteCount: Int) -> StorageRefusal? { directory.refusal(for: byteCount, limits: limits) }

    package func admissionRefusal(announced: Int) -> StorageRefusal? {
        directory.refusal(for: announced, limits: limits, alsoWritten: spooledCopy?.bytes(announced: announced) ?? 0)
    }

    package func writeRefusal(announced: Int?, received: Int) -> StorageRefusal? {
        let spooled = announced.map { spooledCopy?.bytes(announced: $0, received: received) ?? 0 } ?? 0
        return limits.writeRefusal(at: directory.path.string, announced: announced, received: received, alsoWritten: spooled)
    }

    package var partialPayloadStore: (any PartialPayloadStore)? { directory.partialFiles() }
}

extension OutputDirectory {
    /// Stores a received message under the name its sender gave it (sanitized; a relative path recreates the tree's
    /// directories inside this one) or, without one, under `generatedName`; with the sender's key and modification
    /// time when known. A sender's name the file system refuses (too long for it, a character it cannot hold), or one
    /// with no free numbered variant left, gives way to `generatedName`: the message is kept all the same.
    ///
    /// `folder`: a directory under this one to store into (made one safe component), as the receiver daemon's
    /// `--folder-per-sender` names each sender's.
    ///
    /// Runs on ``BlockingCalls/storage`` as ``store(_:baseName:sender:modificationTime:)`` does, fallback name
    /// included.
    package func store(_ message: ReceivedMessage, generatedName: String,
                      folder: String? = nil) async throws(OutputDirectoryError) -> FilePath {
        let directory = self
        return try await BlockingCalls.run { () throws(OutputDirectoryError) in
            try directory.storeBlocking(message, generatedName: generatedName, folder: folder)
        }
    }

    /// The work of ``store(_:generatedName:folder:)``, blocking the calling thread.
    func storeBlocking(_ message: ReceivedMessage, generatedName: String, folder: String?) throws(OutputDirectoryError) -> FilePath {
        // A tree's file keeps its relative path; `store` makes each component safe.
        let sent = message.file.map(\.name).flatMap { Self.sanitizedRelativePath($0).file != nil ? $0 : nil }
        let modified = message.file.flatMap {
            Self.acceptedModificationTime(seconds: $0.modificationSeconds, nanoseconds: $0.modificationNanoseconds)
        }
        let prefix = folder.flatMap(Self.sanitizedFileName).map { $0 + "/" } ?? ""
        do {
            return try storeBlocking(message.body, baseName: prefix + (sent ?? generatedName),
                                     sender: message.authenticatedSender, modificationTime: modified)
        } catch .nameRefused where sent != nil, .noFreeName where sent != nil {
            return try storeBlocking(message.body, baseName: prefix + generatedName,
                                     sender: message.authenticatedSender, modificationTime: modified)
        }
    }
}
