import Foundation
import SystemPackage
import Transfer

/// Writes each message to its own new file in a directory (`--output-dir DIR`), through
/// ``OutputDirectory``: atomic, never replacing a file. Names say when and what:
/// `message-20250101-120000-1.txt` for UTF-8 text, `.bin` otherwise.
public struct OutputDirectorySink: MessageSink {
    public let directory: OutputDirectory
    public let limits: StorageLimits

    public init(path: FilePath, limits: StorageLimits = .default) throws(SinkFailure) {
        self.limits = limits
        do {
            directory = try OutputDirectory(path: path)
        } catch {
            throw SinkFailure(.ioError, "--output-dir: \(error)")
        }
    }

    public func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let name = Self.fileName(sequence: sequence, isText: message.text != nil, date: Date())
        do {
            return try directory.store(message.payload, baseName: name, sender: message.authenticatedSender).string
        } catch {
            throw SinkFailure(.ioError, "\(error)")
        }
    }

    public func admissionRefusal(byteCount: Int) -> StorageRefusal? {
        directory.refusal(for: byteCount, limits: limits)
    }

    static func fileName(sequence: Int, isText: Bool, date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        return "message-\(formatter.string(from: date))-\(sequence).\(isText ? "txt" : "bin")"
    }
}
