import Foundation
import Synchronization
import Transfer
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// The receiver's memory, on disk, of messages it stored whose ACK its sender may not have
/// seen: so that a message sent again after either side was killed, restarted or cut off is
/// acknowledged and not stored a second time, and one that was never stored is not taken for
/// stored.
///
/// An entry is written (and flushed) **before** the message is stored, marked stored with its
/// path once the file has its name, marked acknowledged once the sender is known to have the
/// ACK, and dropped `retention` after that: a sender killed between reading the ACK and
/// moving its file to `sent/` offers the file again after its restart, and is answered
/// "stored" then too. A message from the same sender with the same SHA-256 in a later visit
/// finds it:
/// - marked stored, and the file still there with that size: already stored;
/// - not marked (the receiver died between the two writes): the file the message would have
///   become is looked for under its name and numbered variants, by size and SHA-256; found,
///   already stored; not found, it was never stored and is stored now.
/// Entries of the visit under way are not matched: a sender sending the same bytes twice in one
/// session (`send --count 2`) means two messages.
///
/// One JSON file per output directory, kept with the resume spool (never in the output
/// directory, where only whole messages appear), replaced atomically on every change; at most
/// `capacity` entries, oldest out.
public final class ReceiptJournal: Sendable {
    public struct Entry: Codable, Sendable, Equatable {
        /// Who sent it: the key fingerprint of an authenticated sender, else its address.
        public var sender: String
        /// Lower-case hex SHA-256 of the payload.
        public var digest: String
        public var size: Int
        /// The name it was to be stored under (relative to the directory), for the search
        /// after a crash; nil for a generated name.
        public var name: String?
        /// Where it was stored, once it was.
        public var storedAt: String?
        /// The visit that stored it (entries of the visit under way are not matched).
        public var visit: String
        /// When the sender was known to have the ACK (seconds since 1970); nil until then.
        public var acknowledgedAt: Double?
    }

    public let path: String
    /// The directory the messages are stored in (where the search after a crash looks).
    public let directory: String
    public static let capacity = 256
    /// How long an acknowledged entry is kept: longer than a crashed sender takes to restart.
    public static let defaultRetention: Duration = .seconds(3600)
    public let retention: Duration
    private let clock: @Sendable () -> Double
    private let entries: Mutex<[Entry]>

    /// The journal of the output directory `directory`, kept in `stateDirectory` (the resume
    /// spool's) under a name derived from the directory's absolute path. An unreadable or
    /// malformed file counts as empty: the journal only ever prevents duplicates, never a
    /// delivery.
    public init(directory: String, stateDirectory: String, retention: Duration = ReceiptJournal.defaultRetention,
                clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.directory = directory
        self.retention = retention
        self.clock = clock
        let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
        let tag = FramedHeader.sha256(Array(absolute.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
        path = (stateDirectory.hasSuffix("/") ? stateDirectory : stateDirectory + "/") + "receipts-\(tag).json"
        let data = FileManager.default.contents(atPath: path) ?? Data()
        entries = Mutex((try? JSONDecoder().decode([Entry].self, from: data)) ?? [])
    }

    public var count: Int { entries.withLock { $0.count } }
    public var all: [Entry] { entries.withLock { $0 } }

    /// Before storing: what is about to be stored, flushed to disk.
    public func willStore(sender: String, digest: String, size: Int, name: String?, visit: String) {
        update { list in
            list.append(Entry(sender: sender, digest: digest, size: size, name: name, storedAt: nil, visit: visit))
        }
    }

    /// After storing: where it went.
    public func stored(sender: String, digest: String, visit: String, at storedAt: String?) {
        update { list in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest && $0.visit == visit }) {
                list[index].storedAt = storedAt
            }
        }
    }

    /// The sender has the ACK: kept `retention` longer, for a sender that dies before it
    /// moves the message to `sent/` and offers it again.
    public func acknowledged(sender: String, digest: String) {
        let now = clock()
        update { list in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest && $0.acknowledgedAt == nil }) {
                list[index].acknowledgedAt = now
            }
        }
    }

    /// The message was not stored after all: forget it.
    public func forget(sender: String, digest: String) {
        update { list in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest }) {
                list.remove(at: index)
            }
        }
    }

    /// Where an earlier visit stored this message, if it did (see the type's description);
    /// nil when it must be stored. An entry found stays until `forget`.
    public func earlierCopy(sender: String, digest: String, size: Int, excludingVisit visit: String) -> String? {
        let candidates = entries.withLock { list in
            list.filter { $0.sender == sender && $0.digest == digest && $0.size == size && $0.visit != visit }
        }
        for entry in candidates.reversed() {
            if let storedAt = entry.storedAt, Self.holds(storedAt, size: size, digest: digest, checkDigest: false) {
                return storedAt
            }
            if entry.storedAt == nil, let found = search(for: entry) {
                stored(sender: sender, digest: digest, visit: entry.visit, at: found)
                return found
            }
        }
        // Nothing of it on disk: the entries only mislead from now on.
        if !candidates.isEmpty { update { list in list.removeAll { candidates.contains($0) } } }
        return nil
    }

    /// The file a message whose storing was interrupted may have become: its name or one of
    /// its numbered variants, with its size and SHA-256.
    private func search(for entry: Entry) -> String? {
        guard let name = entry.name else { return nil }
        let (directories, file) = OutputDirectory.sanitizedRelativePath(name)
        guard let file else { return nil }
        let parent = ([directory] + directories).joined(separator: "/")
        for attempt in 0..<100 {
            let candidate = parent + "/" + (attempt == 0 ? file : OutputDirectory.numbered(file, attempt))
            if Self.holds(candidate, size: entry.size, digest: entry.digest, checkDigest: true) { return candidate }
        }
        return nil
    }

    /// Whether `path` is a regular file of `size` bytes (and, when asked, that SHA-256).
    private static func holds(_ path: String, size: Int, digest: String, checkDigest: Bool) -> Bool {
        var status = stat()
        guard lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFREG, Int(status.st_size) == size else { return false }
        guard checkDigest else { return true }
        // Read in pieces: a stored file may be far larger than memory.
        guard let (file, _) = try? PayloadFile.openForReading(path),
              let sha256 = try? MessagePayload(file: file, count: size).sha256() else { return false }
        return sha256.map { String(format: "%02x", $0) }.joined() == digest
    }

    private func update(_ change: (inout [Entry]) -> Void) {
        let oldest = clock() - Double(retention.components.seconds)
        entries.withLock { list in
            change(&list)
            list.removeAll { ($0.acknowledgedAt ?? .infinity) < oldest }
            if list.count > Self.capacity { list.removeFirst(list.count - Self.capacity) }
            // Nothing to remember: no file (the spool's directory holds only what is pending).
            if list.isEmpty {
                _ = unlink(path)
                return
            }
            guard let data = try? JSONEncoder().encode(list) else { return }
            // Best effort: a journal that cannot be written costs only the protection against
            // duplicates, never a message.
            try? AtomicFile.replace(path: path, contents: String(decoding: data, as: UTF8.self), mode: 0o600)
        }
    }
}
