#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SystemPackage
import Transfer
import Trust

/// The receiver's private store of unfinished secure messages (docs/wire-v2.md section 5): for
/// each, the contiguous authenticated prefix from offset 0, so that a later session with the
/// same sender continues where the cut one stopped instead of at byte 0.
///
/// An entry is keyed by the sender's static key and the message's SHA-256 and length from its
/// HEADER (one file, named from the three). In version 2's plain mode no key authenticates the
/// sender: its entries share the name `plain` in place of the key, and only the SHA-256 over
/// the whole message, checked at its END, decides whether a checkpoint was sound. Bytes are appended as each DATA record opens, so an
/// entry survives a cut link and a killed receiver alike: at worst it ends a record short.
/// Nothing partial ever reaches the output directory; the spool is a directory of its own,
/// mode 0700, its files 0600.
///
/// Bounded: entries older than `maximumAge` (by their last write) go first, then the oldest
/// until the spool fits `maximumBytes`; a message larger than what is left keeps a shorter
/// checkpoint. Cleaned when opened and whenever an entry starts. An entry is removed once its
/// message verified (it is then stored) or failed verification.
public final class ResumeSpool: Sendable {
    public struct Bounds: Sendable, Hashable {
        /// The most bytes all entries may hold together.
        public var maximumBytes: Int
        /// An entry not written to for this long is removed.
        public var maximumAge: Duration

        public static let defaultMaximumBytes = 256 << 20
        public static let defaultMaximumAge: Duration = .seconds(7 * 24 * 3600)

        public init(maximumBytes: Int = Bounds.defaultMaximumBytes, maximumAge: Duration = Bounds.defaultMaximumAge) {
            self.maximumBytes = max(0, maximumBytes)
            self.maximumAge = maximumAge
        }
    }

    public enum SpoolError: Error, Sendable, Equatable, CustomStringConvertible {
        case unusable(path: String, reason: String)

        public var description: String {
            switch self {
            case .unusable(let path, let reason): return "resume spool \(path) is unusable: \(reason)"
            }
        }
    }

    /// Messages shorter than this keep no checkpoint: sent again whole, they cost less than
    /// the file work of tracking them, which a daemon draining many small files would pay per
    /// message.
    public static let minimumCheckpointedLength: UInt64 = 64 * 1024

    /// Whether a message with this header keeps a checkpoint (see `minimumCheckpointedLength`).
    public static func checkpoints(_ header: MessageHeader) -> Bool {
        header.payloadLength >= minimumCheckpointedLength
    }

    public let directory: String
    public let bounds: Bounds
    /// Serializes the file operations of the sessions sharing this spool (one central runs one
    /// session at a time, but the daemon's supervisor may overlap a closing and a new one).
    private let lock = Mutex(())

    /// Creates `directory` (and missing parents, 0700) and cleans it.
    /// - Throws: `.unusable` when it cannot be created or is not a directory of ours.
    public init(directory: String, bounds: Bounds = Bounds(), now: Date = Date()) throws(SpoolError) {
        self.directory = directory
        self.bounds = bounds
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw .unusable(path: directory, reason: "cannot create it (\(Self.reason(error)))")
        }
        var info = stat()
        guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .unusable(path: directory, reason: "not a directory")
        }
        guard info.st_uid == geteuid() else { throw .unusable(path: directory, reason: "owned by another user") }
        // Private whatever the umask or an earlier mode: it holds other hosts' messages.
        if info.st_mode & 0o777 != 0o700, chmod(directory, 0o700) != 0 {
            throw .unusable(path: directory, reason: "cannot make it private (mode 0700)")
        }
        clean(now: now)
    }

    /// The default for `receive`: `$XDG_STATE_HOME/bletransfer/spool`, or
    /// `~/.local/state/bletransfer/spool` when XDG_STATE_HOME is unset or not absolute.
    public static func defaultInteractiveDirectory(environment: [String: String], homeDirectory: String) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/bletransfer/spool" }
        return homeDirectory + "/.local/state/bletransfer/spool"
    }

    /// The default for the daemon run by the service user: the unit's StateDirectory
    /// `bletransfer/spool` (beside the inbox, never inside it).
    public static let serviceDaemonDirectory = "/var/lib/bletransfer/spool"


    /// The file name of an entry: sender key (or `plain`), SHA-256 and length, all hex or decimal.
    static func entryName(sender: PeerKey?, digest: [UInt8], length: UInt64) -> String {
        (sender.map { hex($0.rawBytes) } ?? "plain") + "-" + hex(digest) + "-" + String(length) + ".part"
    }

    private func path(sender: PeerKey?, header: MessageHeader) -> String {
        directory + "/" + Self.entryName(sender: sender, digest: header.digest, length: header.payloadLength)
    }

    /// The bytes held for this message (empty: no entry). A stale or oversized entry is
    /// removed instead.
    public func heldPrefix(sender: PeerKey?, header: MessageHeader) -> [UInt8] {
        lock.withLock { _ in
            let path = path(sender: sender, header: header)
            guard let data = FileManager.default.contents(atPath: path) else { return [] }
            guard UInt64(data.count) <= header.payloadLength else {
                unlink(path)
                return []
            }
            return Array(data)
        }
    }

    /// The bytes held for this message as an open file, read in pieces (empty: no entry);
    /// a stale or oversized entry is removed instead.
    public func heldPrefixFile(sender: PeerKey?, header: MessageHeader) -> MessagePayload {
        lock.withLock { _ in
            let path = path(sender: sender, header: header)
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { return MessagePayload([]) }
            var info = stat()
            guard fstat(descriptor, &info) == 0, UInt64(info.st_size) <= header.payloadLength else {
                _ = close(descriptor)
                unlink(path)
                return MessagePayload([])
            }
            return MessagePayload(file: PayloadFile(descriptor: descriptor, path: path), count: Int(info.st_size))
        }
    }

    /// Appends `bytes` at `offset` of the message's entry (created 0600 at offset 0). Bytes
    /// that would not fit the spool's bound are not kept: the checkpoint stays shorter. An
    /// `offset` other than the entry's length (a gap, or bytes held already) leaves it as is.
    public func append(sender: PeerKey?, header: MessageHeader, offset: Int, bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        lock.withLock { _ in
            let path = path(sender: sender, header: header)
            if offset == 0 { cleanLocked(now: Date(), keeping: nil) }
            var info = stat()
            let held = stat(path, &info) == 0 ? Int(info.st_size) : 0
            guard held == offset else { return }
            // Room: the other entries are evicted, oldest first, before this one is refused.
            if usedBytes() + bytes.count > bounds.maximumBytes {
                evict(toFit: bytes.count, keeping: path)
                guard usedBytes() + bytes.count <= bounds.maximumBytes else { return }
            }
            do {
                let file = try FileDescriptor.open(
                    FilePath(path), .writeOnly, options: [.create, .append, .noFollow, .closeOnExec],
                    permissions: [.ownerReadWrite])
                defer { try? file.close() }
                _ = try file.writeAll(bytes)
            } catch {
                // A checkpoint is an optimization: a full disk only means a longer next visit.
                return
            }
        }
    }

    /// Removes the message's entry: it was stored, or it failed verification.
    public func remove(sender: PeerKey?, header: MessageHeader) {
        lock.withLock { _ in _ = unlink(path(sender: sender, header: header)) }
    }

    /// Removes entries older than `maximumAge`, then the oldest until the bound holds.
    public func clean(now: Date = Date()) {
        lock.withLock { _ in cleanLocked(now: now, keeping: nil) }
    }

    /// What the entries hold, oldest first.
    public func entries() -> [(name: String, bytes: Int, modified: Date)] {
        lock.withLock { _ in listEntries().map { (String($0.path.split(separator: "/").last ?? ""), $0.bytes, $0.modified) } }
    }

    private struct Entry {
        var path: String
        var bytes: Int
        var modified: Date
    }

    private func listEntries() -> [Entry] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return [] }
        var entries: [Entry] = []
        for name in names where name.hasSuffix(".part") {
            let path = directory + "/" + name
            var info = stat()
            guard lstat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            let modified = Date(timeIntervalSince1970: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9)
            entries.append(Entry(path: path, bytes: Int(info.st_size), modified: modified))
        }
        return entries.sorted { $0.modified < $1.modified }
    }

    private func usedBytes() -> Int { listEntries().reduce(0) { $0 + $1.bytes } }

    private func cleanLocked(now: Date, keeping: String?) {
        let oldest = now.addingTimeInterval(-Double(bounds.maximumAge.components.seconds))
        for entry in listEntries() where entry.modified < oldest && entry.path != keeping { unlink(entry.path) }
        evict(toFit: 0, keeping: keeping)
    }

    /// Removes the oldest entries (but `keeping`) until `extra` more bytes fit.
    private func evict(toFit extra: Int, keeping: String?) {
        var entries = listEntries()
        var used = entries.reduce(0) { $0 + $1.bytes }
        while used + extra > bounds.maximumBytes, let index = entries.firstIndex(where: { $0.path != keeping }) {
            unlink(entries[index].path)
            used -= entries[index].bytes
            entries.remove(at: index)
        }
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }

    private static func reason(_ error: any Error) -> String {
        (error as NSError).localizedFailureReason ?? "\(error.localizedDescription)"
    }
}
