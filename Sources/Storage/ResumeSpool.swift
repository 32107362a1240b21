#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import SystemCalls
import SystemPackage
import Transfer
import Trust

/// The receiver's private store of unfinished secure messages (docs/wire-v2.md section 5): for each, the contiguous
/// authenticated prefix from offset 0, so that a later session with the same sender continues where the cut one
/// stopped instead of at byte 0.
///
/// An entry is keyed by the sender's static key and the message's SHA-256 and length from its HEADER (one file, named
/// from the three). In version 2's plain mode no key authenticates the sender: its entries share the name `plain` in
/// place of the key, and only the SHA-256 over the whole message, checked at its END, decides whether a checkpoint
/// was sound. Bytes are appended as each DATA record opens, so an entry survives a cut link and a killed receiver
/// alike: at worst it ends a record short. Nothing partial ever reaches the output directory; the spool is a
/// directory of its own, mode 0700, its files 0600.
///
/// Bounded: entries older than `maximumAge` (by their last write) go first, then the oldest until the spool fits
/// `maximumBytes` and `maximumEntries`; a message larger than what is left keeps a shorter checkpoint, and no byte is
/// kept where it would leave the file system less free than `reserveBytes` (the receiver's `--reserve`). Cleaned when
/// opened and whenever an entry starts; the folder is listed only then, and the bytes held are counted as they are
/// appended. An entry is removed once its message verified (it is then stored) or failed verification.
package final class ResumeSpool: Sendable {
    package struct Bounds: Sendable, Hashable {
        /// The most bytes all entries may hold together.
        package var maximumBytes: Int
        /// An entry not written to for this long is removed.
        package var maximumAge: Duration
        /// The most entries (unfinished messages) kept at once; a new one evicts the oldest.
        package var maximumEntries: Int
        /// Bytes the spool's file system keeps free: a checkpoint stops growing there.
        package var reserveBytes: Int

        package static let defaultMaximumBytes = 256 << 20
        package static let defaultMaximumAge: Duration = .seconds(7 * 24 * 3600)
        package static let defaultMaximumEntries = 64

        package init(maximumBytes: Int = Bounds.defaultMaximumBytes, maximumAge: Duration = Bounds.defaultMaximumAge,
                    maximumEntries: Int = Bounds.defaultMaximumEntries, reserveBytes: Int = 0) {
            self.maximumBytes = max(0, maximumBytes)
            self.maximumAge = maximumAge
            self.maximumEntries = max(1, maximumEntries)
            self.reserveBytes = max(0, reserveBytes)
        }
    }

    package enum SpoolError: Error, Sendable, Equatable, CustomStringConvertible {
        case unusable(path: String, reason: String)

        package var description: String {
            switch self {
            case .unusable(let path, let reason): return "resume spool \(path) is unusable: \(reason)"
            }
        }
    }

    /// Messages shorter than this keep no checkpoint: sent again whole, they cost less than the file work of tracking
    /// them, which a daemon draining many small files would pay per message.
    package static let minimumCheckpointedLength: UInt64 = 64 * 1024

    /// Whether a message with this header keeps a checkpoint (see `minimumCheckpointedLength`).
    package static func checkpoints(_ header: MessageHeader) -> Bool {
        header.payloadLength >= minimumCheckpointedLength
    }

    package let directory: String
    package let bounds: Bounds
    /// The spool's file system (`st_dev`): a message stored on it also needs room for the spool's copy (`SpooledCopy`).
    package let device: UInt64
    /// Serializes file operations of the sessions sharing this spool (a central runs one at a time; the daemon's
    /// supervisor may overlap a closing and a new one); holds all entries' bytes, counted since the last listing.
    private let lock = Mutex(0)

    /// Creates `directory` (and missing parents, 0700) and cleans it.
    /// - Throws: `.unusable` when it cannot be created or is not a directory of ours.
    package init(directory: String, bounds: Bounds = Bounds(), now: Date = Date()) throws(SpoolError) {
        self.directory = directory
        self.bounds = bounds
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch { throw .unusable(path: directory, reason: "cannot create it (\(Self.reason(error)))") }
        var info = stat()
        guard lstat(directory, &info) == 0, (info.st_mode & S_IFMT) == S_IFDIR else {
            throw .unusable(path: directory, reason: "not a directory")
        }
        guard info.st_uid == geteuid() else { throw .unusable(path: directory, reason: "owned by another user") }
        device = UInt64(info.st_dev)
        // Private whatever the umask or an earlier mode: it holds other hosts' messages.
        if info.st_mode & 0o777 != 0o700, chmod(directory, 0o700) != 0 {
            throw .unusable(path: directory, reason: "cannot make it private (mode 0700)")
        }
        clean(now: now)
    }

    /// `receive`'s default: `$XDG_STATE_HOME/bletransfer/spool` (set, absolute), else under `~/.local/state`.
    package static func defaultInteractiveDirectory(environment: [String: String], homeDirectory: String) -> String {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/bletransfer/spool" }
        return homeDirectory + "/.local/state/bletransfer/spool"
    }

    /// The default for the daemon's service user: its StateDirectory `bletransfer/spool` (beside the inbox, not in it).
    package static let serviceDaemonDirectory = "/var/lib/bletransfer/spool"

    /// The file name of an entry: sender key (or `plain`), SHA-256 and length, all hex or decimal.
    static func entryName(sender: PeerKey?, digest: [UInt8], length: UInt64) -> String {
        (sender.map { lowercaseHex($0.rawBytes) } ?? "plain") + "-" + lowercaseHex(digest) + "-" + String(length) + ".part"
    }

    private func path(sender: PeerKey?, header: MessageHeader) -> String {
        directory + "/" + Self.entryName(sender: sender, digest: header.digest, length: header.payloadLength)
    }

    /// This message's bytes held, as an open file read in pieces (empty: none); a stale or oversized entry is removed.
    package func heldPrefixFile(sender: PeerKey?, header: MessageHeader) -> MessagePayload {
        lock.withLock { used in
            let path = path(sender: sender, header: header)
            let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
            guard descriptor >= 0 else { return MessagePayload([]) }
            var info = stat()
            guard fstat(descriptor, &info) == 0, UInt64(info.st_size) <= header.payloadLength else {
                _ = close(descriptor)
                Self.removeEntry(path, counted: &used)
                return MessagePayload([])
            }
            return MessagePayload(file: PayloadFile(descriptor: descriptor, path: path), count: Int(info.st_size))
        }
    }

    /// Appends `bytes` at `offset` of the message's entry (created 0600 at 0). Bytes past the spool's bound are not
    /// kept: the checkpoint stays shorter. An `offset` other than the entry's length (gap, bytes held) changes nothing.
    package func append(sender: PeerKey?, header: MessageHeader, offset: Int, bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        lock.withLock { used in
            let path = path(sender: sender, header: header)
            if offset == 0 { cleanLocked(now: Date(), starting: path, used: &used) }
            var info = stat()
            let held = stat(path, &info) == 0 ? Int(info.st_size) : 0
            guard held == offset else { return }
            // Room: the other entries are evicted, oldest first, before this one is refused.
            if used + bytes.count > bounds.maximumBytes {
                evict(toFit: bytes.count, keeping: path, used: &used)
                guard used + bytes.count <= bounds.maximumBytes else { return }
            }
            guard leavesReserve(afterWriting: bytes.count) else { return }
            do {
                let file = try FileDescriptor.open(
                    FilePath(path), .writeOnly, options: [.create, .append, .noFollow, .closeOnExec],
                    permissions: [.ownerReadWrite])
                defer { try? file.close() }
                used += try file.writeAll(bytes)
            } catch {
                // A checkpoint is an optimization: a full disk only means a longer next visit.
                // What a failed write left is counted at the next listing.
                return
            }
        }
    }

    /// Whether the spool's file system still has `reserveBytes` free once `count` more bytes
    /// are written (always, without a reserve or when it cannot be read).
    private func leavesReserve(afterWriting count: Int) -> Bool {
        guard bounds.reserveBytes > 0 else { return true }
        var info = statvfs()
        guard statvfs(directory, &info) == 0 else { return true }
        let free = Int(clamping: UInt64(info.f_bavail) &* UInt64(info.f_frsize))
        return free - count >= bounds.reserveBytes
    }

    /// Removes the message's entry: it was stored, or it failed verification.
    package func remove(sender: PeerKey?, header: MessageHeader) {
        lock.withLock { used in Self.removeEntry(path(sender: sender, header: header), counted: &used) }
    }

    /// Removes entries older than `maximumAge`, then the oldest until the bounds hold.
    package func clean(now: Date = Date()) {
        lock.withLock { used in cleanLocked(now: now, starting: nil, used: &used) }
    }

    /// The bytes all entries hold, as counted since the last listing.
    package var heldBytes: Int { lock.withLock { $0 } }

    /// What the entries hold, oldest first.
    package func entries() -> [(name: String, bytes: Int, modified: Date)] {
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

    /// Unlinks an entry, taking its bytes off the count.
    private static func removeEntry(_ path: String, counted used: inout Int) {
        var info = stat()
        guard lstat(path, &info) == 0 else { return }
        if unlink(path) == 0 { used = max(0, used - Int(info.st_size)) }
    }

    /// Lists the folder (the only place it is listed): removes what is too old, then the oldest until the byte bound
    /// holds and, for a new entry `starting`, until it has room beside the others; sets the count of bytes held.
    private func cleanLocked(now: Date, starting: String?, used: inout Int) {
        let oldest = now.addingTimeInterval(-Double(bounds.maximumAge.components.seconds))
        var entries: [Entry] = []
        for entry in listEntries() {
            if entry.modified < oldest { unlink(entry.path) } else { entries.append(entry) }
        }
        used = entries.reduce(0) { $0 + $1.bytes }
        let others = entries.filter { $0.path != starting }
        var surplus = starting == nil ? others.count - bounds.maximumEntries : others.count + 1 - bounds.maximumEntries
        for entry in others where surplus > 0 {
            if unlink(entry.path) == 0 { used -= entry.bytes }
            surplus -= 1
        }
        evict(toFit: 0, keeping: nil, used: &used)
    }

    /// Removes the oldest entries (but `keeping`) until `extra` more bytes fit.
    private func evict(toFit extra: Int, keeping: String?, used: inout Int) {
        guard used + extra > bounds.maximumBytes else { return }
        var entries = listEntries()
        used = entries.reduce(0) { $0 + $1.bytes }
        while used + extra > bounds.maximumBytes, let index = entries.firstIndex(where: { $0.path != keeping }) {
            unlink(entries[index].path)
            used -= entries[index].bytes
            entries.remove(at: index)
        }
    }

    private static func reason(_ error: any Error) -> String {
        (error as NSError).localizedFailureReason ?? "\(error.localizedDescription)"
    }
}
