import DaemonSupport
import Foundation
import Machines
import Roles
import Storage
import Synchronization
import Transfer
import Trust

/// The receiver daemon's `MessageSink`: each message becomes a new file in the output directory, written atomically
/// (hidden partial file, flushed, then linked to its name; a name is never reused). A message whose sender named its
/// file (secure mode, `meta`) keeps that name, sanitized and numbered when taken
/// (``OutputDirectory/store(_:generatedName:)``); the others are named by `InboxFileName` after their arrival time,
/// so they sort in arrival order. The sequence number in the name counts the daemon's whole run, across the role
/// restarts that Bluetooth outages cause (the central's own count starts again).
final class InboxSink: OutputDirectoryBackedSink {
    let directory: OutputDirectory
    let limits: StorageLimits
    /// `--folder-per-sender`: a message whose sender the secure mode authenticated goes into a
    /// folder named after it (``senderFolder(_:)``); others stay at the top.
    let folderPerSender: Bool
    /// The resume spool's copy of a framed message, counted against the reserve.
    let spooledCopy: SpooledCopy?
    let sequence = Mutex(0)
    private let now: @Sendable () -> Date

    init(directory: OutputDirectory, limits: StorageLimits = .default, folderPerSender: Bool = false,
         resumeSpool: ResumeSpool? = nil, now: @escaping @Sendable () -> Date = Date.init) {
        self.directory = directory
        self.limits = limits
        self.folderPerSender = folderPerSender
        spooledCopy = SpooledCopy(resumeSpool, beside: directory.path.string)
        self.now = now
    }

    /// The folder of a sender: the name its key has in the authorized-peers file, or its fingerprint for a key listed
    /// without one (or let in unlisted); made one safe path component when stored. Nil without a key (Apple's flow).
    static func senderFolder(_ keyLine: String?) -> String? {
        guard let keyLine, let (key, name) = try? PeerKey.parseLine(Substring(keyLine)) else { return nil }
        return name ?? key.fingerprint
    }

    func store(_ message: ReceivedMessage, sequence _: Int, from peer: PeerDescription?) async throws -> String? {
        let number = sequence.withLock { value in
            value += 1
            return value
        }
        let name = InboxFileName.make(receivedAt: now(), sequence: number,
                                     payload: message.body.file == nil ? message.payload : [])
        do {
            let folder = folderPerSender ? Self.senderFolder(message.authenticatedSender) : nil
            return try await directory.store(message, generatedName: name, folder: folder).string
        } catch {
            // Numbers are not reused even when a write fails: names stay unique and ordered.
            // One message that cannot be stored is refused; the daemon goes on serving.
            throw MessageRefused(reason: "\(error)")
        }
    }
}
