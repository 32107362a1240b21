#if canImport(Glibc)
import Glibc
#endif

/// How much of its file system an output directory may take: a free-space reserve that a message must leave untouched
/// (bytes and inodes), and an optional quota of bytes and entries for the messages in the directory, counted down its
/// whole tree (a tree a sender sent, `--folder-per-sender`'s folders). Checked before a message is received (with its
/// announced length), so a message that cannot be kept is refused while its sender still has it, and the reserve
/// again on every write while it arrives.
package struct StorageLimits: Sendable, Hashable {
    /// Bytes that must stay free on the directory's file system after the message is written.
    package var reserveBytes: Int
    /// Inodes that must stay free on the directory's file system after the message is written (its file, and the
    /// directories its path may create); file systems without a fixed number of inodes (btrfs) are not bound by it.
    package var reserveInodes: Int
    /// The most bytes the directory's messages may take together; nil: no quota.
    package var quotaBytes: Int?
    /// The most entries — files and directories — the directory's tree may hold; nil: no quota.
    package var quotaFiles: Int?

    package static let defaultReserveBytes = 64 << 20
    package static let defaultReserveInodes = 4096
    package static let `default` = StorageLimits()

    /// The most inodes one message may take: its file and the directories of its path.
    package static let inodesPerMessage = 1 + OutputDirectory.maximumDepth

    package init(reserveBytes: Int = StorageLimits.defaultReserveBytes, quotaBytes: Int? = nil, quotaFiles: Int? = nil,
                reserveInodes: Int = StorageLimits.defaultReserveInodes) {
        self.reserveBytes = max(0, reserveBytes)
        self.reserveInodes = max(0, reserveInodes)
        self.quotaBytes = quotaBytes
        self.quotaFiles = quotaFiles
    }

    /// What the directory holds and its file system offers, as ``refusal(for:usage:)`` needs.
    package struct Usage: Sendable, Equatable {
        package var freeBytes: Int
        /// Bytes of the regular files down the directory's tree.
        package var storedBytes: Int
        /// Files and directories down the directory's tree (the directory itself not counted).
        package var storedFiles: Int
        /// Free inodes for an unprivileged writer; nil when the file system has no fixed number.
        package var freeInodes: Int?
    }

    /// Why a message of `byteCount` bytes cannot be stored given `usage`; nil when it can. `alsoWritten`: bytes written
    /// beside it on its file system while it arrives (the spool's copy), counted against the reserve, not the quota.
    package func refusal(for byteCount: Int, usage: Usage, alsoWritten: Int = 0) -> StorageRefusal? {
        if let refusal = reserveRefusal(stillToWrite: byteCount, alsoWritten: alsoWritten, usage: usage) { return refusal }
        if let quotaFiles, usage.storedFiles + 1 > quotaFiles {
            return StorageRefusal(bound: .quotaFiles,
                                  reason: "the directory holds \(usage.storedFiles) files and folders, its quota is \(quotaFiles) (--quota-files)")
        }
        if let quotaBytes {
            let total = usage.storedBytes.addingReportingOverflow(byteCount)
            if total.overflow || total.partialValue > quotaBytes {
                return StorageRefusal(
                    bound: .quotaBytes,
                    reason: "\(byteCount) more bytes exceed the quota: \(usage.storedBytes) of \(quotaBytes) bytes used (--quota-bytes)")
            }
        }
        return nil
    }

    /// Why `stillToWrite` more bytes (and `alsoWritten` beside them) cannot be written now
    /// without eating into the reserve of bytes or inodes; nil when they can.
    package func reserveRefusal(stillToWrite: Int, alsoWritten: Int = 0, usage: Usage) -> StorageRefusal? {
        // Saturating sums: the announced length comes from the peer.
        let written = stillToWrite.addingReportingOverflow(max(0, alsoWritten))
        let needed = written.partialValue.addingReportingOverflow(reserveBytes)
        if written.overflow || needed.overflow || needed.partialValue > usage.freeBytes {
            let spool = alsoWritten > 0 ? " and \(alsoWritten) for the resume spool's copy" : ""
            return StorageRefusal(
                bound: .reserve,
                reason: "\(stillToWrite) bytes\(spool) do not fit: \(usage.freeBytes) bytes free, \(reserveBytes) must stay free (--reserve)")
        }
        if let freeInodes = usage.freeInodes, freeInodes < reserveInodes + Self.inodesPerMessage {
            return StorageRefusal(
                bound: .reserve,
                reason: "the file system is out of inodes: \(freeInodes) free, \(reserveInodes) must stay free")
        }
        return nil
    }
}

/// A message refused for lack of room.
package struct StorageRefusal: Sendable, Equatable, CustomStringConvertible {
    package enum Bound: String, Sendable, Equatable {
        case reserve = "reserve"
        case quotaBytes = "quota-bytes"
        case quotaFiles = "quota-files"
    }

    package var bound: Bound
    package var reason: String
    package var description: String { reason }
}

extension StorageLimits {
    /// Free bytes and inodes for an unprivileged writer on the file system of `path` (`f_bavail`, `f_favail`); inodes
    /// nil when the file system has no fixed number of them (`f_files` 0). Nil when unknown.
    package static func freeSpace(at path: String) -> (bytes: Int, inodes: Int?)? {
        var stats = statvfs()
        guard statvfs(path, &stats) == 0 else { return nil }
        let free = UInt64(stats.f_bavail).multipliedReportingOverflow(by: UInt64(stats.f_frsize))
        let bytes = free.overflow || free.partialValue > UInt64(Int.max) ? Int.max : Int(free.partialValue)
        return (bytes, stats.f_files == 0 ? nil : Int(clamping: UInt64(stats.f_favail)))
    }

    /// Why the rest of a message arriving into a file on `path`'s file system (`announced` in all when known,
    /// `received` so far), and `alsoWritten` bytes beside it, cannot be written without eating into the reserve (a
    /// sink that holds messages in partial files there); one `statvfs`, cheap per write.
    package func writeRefusal(at path: String, announced: Int?, received: Int, alsoWritten: Int = 0) -> StorageRefusal? {
        guard let free = Self.freeSpace(at: path) else { return nil }
        return reserveRefusal(stillToWrite: announced.map { max(0, $0 - received) } ?? 0, alsoWritten: alsoWritten,
                              usage: Usage(freeBytes: free.bytes, storedBytes: 0, storedFiles: 0, freeInodes: free.inodes))
    }
}

extension OutputDirectory {
    /// ``StorageLimits/freeSpace(at:)`` of this directory.
    package func freeSpace() -> (bytes: Int, inodes: Int?)? { StorageLimits.freeSpace(at: path.string) }

    /// The messages in the directory, down its whole tree without following a symbolic link: the bytes of its regular
    /// files, and how many files and directories it holds. Names starting with a dot (partial files, anything hidden:
    /// no sender can store one) are left out. Deeper than twice what a message may create is not entered.
    package func storedMessages() -> (bytes: Int, files: Int) {
        let top = open(path.string, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard top >= 0 else { return (0, 0) }
        var bytes = 0
        var entries = 0
        // Directories still to read, each an open descriptor, and its depth.
        var pending: [(Int32, Int)] = [(top, 0)]
        while let (fd, depth) = pending.popLast() {
            guard let stream = fdopendir(fd) else {
                _ = close(fd)
                continue
            }
            while let entry = readdir(stream) {
                let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                    String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
                }
                guard !name.hasPrefix(".") else { continue }
                var info = stat()
                guard fstatat(dirfd(stream), name, &info, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
                switch info.st_mode & S_IFMT {
                case S_IFREG:
                    entries += 1
                    bytes = bytes.addingReportingOverflow(Int(info.st_size)).partialValue
                case S_IFDIR:
                    entries += 1
                    guard depth < 2 * Self.maximumDepth else { continue }
                    let child = openat(dirfd(stream), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if child >= 0 { pending.append((child, depth + 1)) }
                default:
                    entries += 1   // a link, a FIFO: an inode all the same
                }
            }
            closedir(stream)
        }
        return (bytes, entries)
    }

    /// What the directory holds and its file system offers; the tree is read only when a quota is set.
    package func usage(limits: StorageLimits) -> StorageLimits.Usage {
        let stored = limits.quotaBytes != nil || limits.quotaFiles != nil ? storedMessages() : (bytes: 0, files: 0)
        let free = freeSpace()
        return StorageLimits.Usage(freeBytes: free?.bytes ?? Int.max, storedBytes: stored.bytes, storedFiles: stored.files,
                                   freeInodes: free?.inodes)
    }

    /// Why a message of `byteCount` bytes cannot be stored under `limits`; nil when it can.
    /// `alsoWritten`: see ``StorageLimits/refusal(for:usage:alsoWritten:)``.
    package func refusal(for byteCount: Int, limits: StorageLimits, alsoWritten: Int = 0) -> StorageRefusal? {
        limits.refusal(for: byteCount, usage: usage(limits: limits), alsoWritten: alsoWritten)
    }
}
