#if canImport(Glibc)
import Glibc
#endif
import Foundation
import SystemPackage

/// How much of its file system an output directory may take: a free-space reserve that a
/// message must leave untouched, and an optional quota of bytes and files for the messages in
/// the directory. Checked before a message is received (with its announced length), so a
/// message that cannot be kept is refused while its sender still has it.
package struct StorageLimits: Sendable, Hashable {
    /// Bytes that must stay free on the directory's file system after the message is written.
    package var reserveBytes: Int
    /// The most bytes the directory's messages may take together; nil: no quota.
    package var quotaBytes: Int?
    /// The most messages the directory may hold; nil: no quota.
    package var quotaFiles: Int?

    package static let defaultReserveBytes = 64 << 20
    package static let `default` = StorageLimits()

    package init(reserveBytes: Int = StorageLimits.defaultReserveBytes, quotaBytes: Int? = nil, quotaFiles: Int? = nil) {
        self.reserveBytes = max(0, reserveBytes)
        self.quotaBytes = quotaBytes
        self.quotaFiles = quotaFiles
    }

    /// What the directory holds and its file system offers, as ``refusal(for:usage:)`` needs.
    package struct Usage: Sendable, Equatable {
        package var freeBytes: Int
        package var storedBytes: Int
        package var storedFiles: Int

        package init(freeBytes: Int, storedBytes: Int, storedFiles: Int) {
            self.freeBytes = freeBytes
            self.storedBytes = storedBytes
            self.storedFiles = storedFiles
        }
    }

    /// Why a message of `byteCount` bytes cannot be stored given `usage`; nil when it can.
    package func refusal(for byteCount: Int, usage: Usage) -> StorageRefusal? {
        // Saturating sums: the announced length comes from the peer.
        let needed = byteCount.addingReportingOverflow(reserveBytes)
        if needed.overflow || needed.partialValue > usage.freeBytes {
            return StorageRefusal(
                bound: .reserve,
                reason: "\(byteCount) bytes do not fit: \(usage.freeBytes) bytes free, \(reserveBytes) must stay free (--reserve)")
        }
        if let quotaFiles, usage.storedFiles + 1 > quotaFiles {
            return StorageRefusal(bound: .quotaFiles,
                                  reason: "the directory holds \(usage.storedFiles) messages, its quota is \(quotaFiles) (--quota-files)")
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

extension OutputDirectory {
    /// Free bytes for an unprivileged writer on the directory's file system; nil when unknown.
    package func freeBytes() -> Int? {
        var stats = statvfs()
        guard statvfs(path.string, &stats) == 0 else { return nil }
        let free = UInt64(stats.f_bavail).multipliedReportingOverflow(by: UInt64(stats.f_frsize))
        return free.overflow || free.partialValue > UInt64(Int.max) ? Int.max : Int(free.partialValue)
    }

    /// The messages in the directory: visible regular files (partial files are hidden).
    package func storedMessages() -> (bytes: Int, files: Int) {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path.string) else { return (0, 0) }
        var bytes = 0
        var files = 0
        for name in names where !name.hasPrefix(".") {
            var info = stat()
            guard lstat(path.appending(name).string, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { continue }
            files += 1
            bytes = bytes.addingReportingOverflow(Int(info.st_size)).partialValue
        }
        return (bytes, files)
    }

    /// Why a message of `byteCount` bytes cannot be stored under `limits`; nil when it can.
    /// The directory is read only when a quota is set.
    package func refusal(for byteCount: Int, limits: StorageLimits) -> StorageRefusal? {
        let stored = limits.quotaBytes != nil || limits.quotaFiles != nil ? storedMessages() : (bytes: 0, files: 0)
        let usage = StorageLimits.Usage(freeBytes: freeBytes() ?? Int.max, storedBytes: stored.bytes, storedFiles: stored.files)
        return limits.refusal(for: byteCount, usage: usage)
    }
}
