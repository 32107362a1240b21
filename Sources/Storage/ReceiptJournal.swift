import Foundation
import Synchronization
import SystemCalls
import Transfer
import Trust

#if canImport(Glibc)
import Glibc
import SystemPackage
#endif

/// The receiver's memory, on disk, of messages it stored whose ACK its sender may not have seen: so that a message
/// sent again after either side was killed, restarted or cut off is acknowledged and not stored a second time, and
/// one that was never stored is not taken for stored.
///
/// An entry is written (and flushed) **before** the message is stored, marked stored with its path once the file has
/// its name, marked acknowledged once the sender is known to have the ACK, and dropped `retention` after that: a
/// sender killed between reading the ACK and moving its file to `sent/` offers the file again after its restart, and
/// is answered "stored" then too. A message from the same sender with the same SHA-256 in a later visit finds it:
/// - marked stored, and the file still there with that size: already stored;
/// - not marked (the receiver died between the two writes): the file the message would have become is looked for
///   under its name and numbered variants, by size and SHA-256; found, already stored; not found, it was never stored
///   and is stored now.
/// Entries of the visit under way are not matched: a sender sending the same bytes twice in one session (`send
/// --count 2`) means two messages.
///
/// One file per output directory, kept with the resume spool (never in the output directory, where only whole
/// messages appear): a log of JSON lines, each the new state of one entry or its removal, appended as things happen.
/// A message costs a few appended lines and two flushes (before storing, and once stored), not a rewrite of every
/// entry: a daemon storing a hundred small files in one session did that work between each message and its ACK. The
/// log is rewritten atomically (compacted) once it holds several times more lines than entries; a line cut short by a
/// crash is skipped when read. At most `capacity` entries, oldest out.
package final class ReceiptJournal: Sendable {
    package struct Entry: Codable, Sendable, Equatable {
        /// In the order made: a later line with the same id replaces an entry; the same bytes twice in a visit are two.
        package var id: Int
        /// Who sent it: the key fingerprint of an authenticated sender, else its address.
        package var sender: String
        /// Lower-case hex SHA-256 of the payload.
        package var digest: String
        package var size: Int
        /// The name it was to be stored under (relative), for the search after a crash; nil for a generated name.
        package var name: String?
        /// Where it was stored, once it was.
        package var storedAt: String?
        /// The visit that stored it (entries of the visit under way are not matched).
        package var visit: String
        /// When the sender was known to have the ACK (seconds since 1970); nil until then.
        package var acknowledgedAt: Double?
    }

    package let path: String
    /// The directory the messages are stored in (where the search after a crash looks).
    package let directory: String
    package static let capacity = 256
    /// How long an acknowledged entry is kept: longer than a crashed sender takes to restart.
    package static let defaultRetention: Duration = .seconds(3600)
    package let retention: Duration
    private let clock: @Sendable () -> Double
    private let state: Mutex<LogState>

    /// One line of the log: an entry as it now is, or the number of one removed.
    private struct Line: Codable {
        var entry: Entry?
        var removed: Int?
    }

    /// The entries, in the order they were made, and the log they are kept in.
    private struct LogState {
        var entries: [Entry]
        var nextID: Int
        /// Lines in the file (entries and removals): compacted past `compactionThreshold`.
        var lines: Int
        /// The log, open for appending; -1 until the first change.
        var descriptor: Int32 = -1
    }

    /// The journal of the output directory `directory`, in `stateDirectory` (the spool's), named from its absolute
    /// path. An unreadable or malformed file counts as empty: it only prevents duplicates, never a delivery.
    package init(directory: String, stateDirectory: String, retention: Duration = ReceiptJournal.defaultRetention,
                clock: @escaping @Sendable () -> Double = { Date().timeIntervalSince1970 }) {
        self.directory = directory
        self.retention = retention
        self.clock = clock
        let absolute = URL(fileURLWithPath: directory).standardizedFileURL.path
        let tag = lowercaseHex(sha256(Array(absolute.utf8)).prefix(8))
        path = (stateDirectory.hasSuffix("/") ? stateDirectory : stateDirectory + "/") + "receipts-\(tag).jsonl"
        state = Mutex(Self.read(path))
    }

    deinit {
        state.withLock { if $0.descriptor >= 0 { _ = close($0.descriptor) } }
    }

    package var count: Int { state.withLock { $0.entries.count } }
    package var all: [Entry] { state.withLock { $0.entries } }

    // MARK: From async code
    //
    // Each makes the blocking call of the same meaning (below) on ``BlockingCalls/storage``: the flushes (`fdatasync`
    // of the log, `fsync` of its directory, the compaction's rewrite) and the search after a crash (reading stored
    // files whole for their SHA-256) never block the cooperative pool. A task cancelled meanwhile still waits for the
    // change: the journal's promise (on disk before the message is stored) must hold either way.

    package func recordWillStore(sender: String, digest: String, size: Int, name: String?, visit: String) async {
        await BlockingCalls.run { self.willStore(sender: sender, digest: digest, size: size, name: name, visit: visit) }
    }

    package func recordStored(sender: String, digest: String, visit: String, at storedAt: String?) async {
        await BlockingCalls.run { self.stored(sender: sender, digest: digest, visit: visit, at: storedAt) }
    }

    package func recordAcknowledged(sender: String, digest: String) async {
        await BlockingCalls.run { self.acknowledged(sender: sender, digest: digest) }
    }

    package func recordForgotten(sender: String, digest: String) async {
        await BlockingCalls.run { self.forget(sender: sender, digest: digest) }
    }

    package func findEarlierCopy(sender: String, digest: String, size: Int, excludingVisit visit: String) async -> String? {
        await BlockingCalls.run { self.earlierCopy(sender: sender, digest: digest, size: size, excludingVisit: visit) }
    }

    // MARK: On the calling thread
    //
    // These block the calling thread while the log is flushed (`earlierCopy`: while stored files are read).

    /// Before storing: what is about to be stored, flushed to disk.
    package func willStore(sender: String, digest: String, size: Int, name: String?, visit: String) {
        update(flush: true) { list, nextID in
            list.append(Entry(id: nextID, sender: sender, digest: digest, size: size, name: name, storedAt: nil, visit: visit))
            nextID += 1
        }
    }

    /// After storing: where it went, flushed to disk.
    package func stored(sender: String, digest: String, visit: String, at storedAt: String?) {
        update(flush: true) { list, _ in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest && $0.visit == visit }) {
                list[index].storedAt = storedAt
            }
        }
    }

    /// The sender has the ACK: kept `retention` longer, for a sender that dies before moving it to `sent/` and resends.
    package func acknowledged(sender: String, digest: String) {
        let now = clock()
        // Not flushed: lost in a power cut, the entry is only kept longer (up to `capacity`).
        update(flush: false) { list, _ in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest && $0.acknowledgedAt == nil }) {
                list[index].acknowledgedAt = now
            }
        }
    }

    /// The message was not stored after all: forget it.
    package func forget(sender: String, digest: String) {
        // Not flushed: an entry with no file behind it is dropped when it is next looked up.
        update(flush: false) { list, _ in
            if let index = list.lastIndex(where: { $0.sender == sender && $0.digest == digest }) {
                list.remove(at: index)
            }
        }
    }

    /// Where an earlier visit stored this message (see the type); nil: store it. An entry found stays until `forget`.
    package func earlierCopy(sender: String, digest: String, size: Int, excludingVisit visit: String) -> String? {
        let candidates = state.withLock { current in
            current.entries.filter { $0.sender == sender && $0.digest == digest && $0.size == size && $0.visit != visit }
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
        if !candidates.isEmpty {
            let gone = Set(candidates.map(\.id))
            update(flush: false) { list, _ in list.removeAll { gone.contains($0.id) } }
        }
        return nil
    }

    /// The file an interrupted store may have become: its name or a numbered variant, with its size and SHA-256.
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
        return lowercaseHex(sha256) == digest
    }

    /// Applies `change` (which may number new entries from the `Int`), prunes what is past its retention or beyond
    /// `capacity`, and appends a line per entry changed or removed; `flush`: on disk before returning. Best effort: a
    /// journal that cannot be written costs only the protection against duplicates, never a message.
    private func update(flush: Bool, _ change: (inout [Entry], inout Int) -> Void) {
        let oldest = clock() - Double(retention.components.seconds)
        state.withLock { current in
            let before = Dictionary(current.entries.map { ($0.id, $0) }, uniquingKeysWith: { $1 })
            change(&current.entries, &current.nextID)
            current.entries.removeAll { ($0.acknowledgedAt ?? .infinity) < oldest }
            if current.entries.count > Self.capacity { current.entries.removeFirst(current.entries.count - Self.capacity) }
            // Nothing to remember: no file (the spool's directory holds only what is pending).
            if current.entries.isEmpty {
                Self.closeLog(&current)
                _ = unlink(path)
                return
            }
            let kept = Set(current.entries.map(\.id))
            var lines = current.entries.filter { before[$0.id] != $0 }.map { Line(entry: $0) }
            lines += before.keys.filter { !kept.contains($0) }.sorted().map { Line(removed: $0) }
            guard !lines.isEmpty else { return }
            if current.lines + lines.count > Self.compactionThreshold(entries: current.entries.count) {
                compact(&current)
            } else { append(lines, to: &current, flush: flush) }
        }
    }

    /// A log this many lines long is rewritten with one line per entry.
    private static func compactionThreshold(entries: Int) -> Int { 4 * entries + 256 }

    private func append(_ lines: [Line], to current: inout LogState, flush: Bool) {
        let encoder = JSONEncoder()
        var bytes: [UInt8] = []
        for line in lines {
            guard let data = try? encoder.encode(line) else { continue }
            bytes += data
            bytes.append(UInt8(ascii: "\n"))
        }
        if current.descriptor < 0 {
            let parent = (path as NSString).deletingLastPathComponent
            try? FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true,
                                                     attributes: [.posixPermissions: 0o700])
            let descriptor = open(path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else { return }
            current.descriptor = descriptor
            // A line a crash cut short ends here first, so the next one is not glued to it.
            var status = stat()
            var last: UInt8 = 0
            if fstat(descriptor, &status) == 0, status.st_size > 0,
               pread(descriptor, &last, 1, status.st_size - 1) == 1, last != UInt8(ascii: "\n") {
                bytes.insert(UInt8(ascii: "\n"), at: 0)
            }
            // The log's own name must survive a crash too.
            let directory = open(parent, O_RDONLY | O_CLOEXEC | O_DIRECTORY)
            if directory >= 0 { _ = fsync(directory); _ = close(directory) }
        }
        do {
            _ = try FileDescriptor(rawValue: current.descriptor).writeAll(bytes)
        } catch {
            // A line cut short is skipped when read; the next change starts a fresh log.
            Self.closeLog(&current)
            current.lines = Self.compactionThreshold(entries: current.entries.count) + 1
            return
        }
        current.lines += lines.count
        if flush { _ = fdatasync(current.descriptor) }
    }

    /// Rewrites the log with one line per entry (atomically: the old log or the new one).
    private func compact(_ current: inout LogState) {
        Self.closeLog(&current)
        let encoder = JSONEncoder()
        let text = current.entries.compactMap { entry in
            (try? encoder.encode(Line(entry: entry))).map { String(decoding: $0, as: UTF8.self) + "\n" }
        }.joined()
        guard (try? AtomicFile.replace(path: path, contents: text, mode: 0o600)) != nil else { return }
        current.lines = current.entries.count
    }

    private static func closeLog(_ current: inout LogState) {
        if current.descriptor >= 0 { _ = close(current.descriptor) }
        current.descriptor = -1
        current.lines = 0
    }

    /// Ids are below this (2^53: a million changes a second for centuries).
    static let idLimit = 1 << 53

    /// The entries a log holds: its lines replayed in order (a malformed one skipped).
    private static func read(_ path: String) -> LogState {
        guard let data = FileManager.default.contents(atPath: path) else { return LogState(entries: [], nextID: 0, lines: 0) }
        let decoder = JSONDecoder()
        var entries: [Entry] = []
        var index: [Int: Int] = [:]
        var lines = 0
        var highestID = -1
        for text in data.split(separator: UInt8(ascii: "\n")) {
            // An id out of range (a damaged or edited log) is a malformed line: counting on from it would overflow.
            guard let line = try? decoder.decode(Line.self, from: Data(text)),
                  (line.entry?.id ?? line.removed).map({ (0..<Self.idLimit).contains($0) }) ?? false
            else { continue }
            lines += 1
            highestID = max(highestID, line.entry?.id ?? line.removed ?? -1)
            if let entry = line.entry {
                if let at = index[entry.id] { entries[at] = entry } else {
                    index[entry.id] = entries.count
                    entries.append(entry)
                }
            } else if let removed = line.removed, let at = index[removed] {
                entries.remove(at: at)
                index = Dictionary(uniqueKeysWithValues: entries.enumerated().map { ($1.id, $0) })
            }
        }
        // The log is appended to from the next change on; one far longer than its entries is compacted then.
        return LogState(entries: entries, nextID: highestID + 1, lines: lines)
    }
}
