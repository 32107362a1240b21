#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation

/// Tells whether a file descriptor is connected to the systemd journal. systemd sets `$JOURNAL_STREAM` to
/// "DEVICE:INODE" of the stream it connected to stdout/stderr; when the descriptor still is that stream (not
/// redirected by a wrapper), the journal reads the `<N>` priority prefixes of sd-daemon(3).
package enum JournalStream {
    /// True when `fd` refers to the device and inode named in `environmentValue`.
    package static func isJournal(fd: Int32, environmentValue: String?) -> Bool {
        guard let expected = parse(environmentValue) else { return false }
        var status = stat()
        guard fstat(fd, &status) == 0 else { return false }
        return UInt64(status.st_dev) == expected.device && UInt64(status.st_ino) == expected.inode
    }

    package static var isStandardErrorJournal: Bool {
        isJournal(fd: STDERR_FILENO, environmentValue: ProcessInfo.processInfo.environment["JOURNAL_STREAM"])
    }

    /// "2049:12345" → (2049, 12345); anything else → nil.
    static func parse(_ value: String?) -> (device: UInt64, inode: UInt64)? {
        guard let value else { return nil }
        let parts = value.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return nil }
        return (device, inode)
    }
}
