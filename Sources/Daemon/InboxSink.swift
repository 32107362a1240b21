import DaemonSupport
import Foundation
import Roles
import Synchronization
import SystemPackage
import Transfer

/// The receiver daemon's `MessageSink`: each message becomes a new file in the output
/// directory, written atomically (hidden partial file, flushed, then linked to its name; a
/// name is never reused). A message whose sender named its file (secure mode, `meta`) keeps
/// that name, sanitized and numbered when taken (``OutputDirectory/store(_:generatedName:)``);
/// the others are named by `InboxFileName` after their arrival time, so they sort in arrival
/// order. The sequence number in the name counts the daemon's whole run, across
/// the role restarts that Bluetooth outages cause (the central's own count starts again).
final class InboxSink: MessageSink {
    let directory: OutputDirectory
    let limits: StorageLimits
    private let sequence = Mutex(0)
    private let now: @Sendable () -> Date

    init(directory: OutputDirectory, limits: StorageLimits = .default, now: @escaping @Sendable () -> Date = Date.init) {
        self.directory = directory
        self.limits = limits
        self.now = now
    }

    /// Opens (creating when missing) `path`; leftovers of an interrupted run are removed.
    convenience init(path: FilePath, limits: StorageLimits = .default) throws(OutputDirectoryError) {
        self.init(directory: try OutputDirectory(path: path), limits: limits)
    }

    func admissionRefusal(byteCount: Int) -> StorageRefusal? {
        directory.refusal(for: byteCount, limits: limits)
    }

    /// How many messages were stored.
    var storedCount: Int { sequence.withLock { $0 } }

    func store(_ message: ReceivedMessage, sequence _: Int, from peer: PeerDescription?) async throws -> String? {
        let number = sequence.withLock { value in
            value += 1
            return value
        }
        let name = InboxFileName.make(receivedAt: now(), sequence: number, payload: message.payload)
        do {
            return try directory.store(message, generatedName: name).string
        } catch {
            // Numbers are not reused even when a write fails: names stay unique and ordered.
            // One message that cannot be stored is refused; the daemon goes on serving.
            throw MessageRefused(reason: "\(error)")
        }
    }
}
