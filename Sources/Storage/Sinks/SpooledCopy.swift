#if canImport(Glibc)
import Glibc
#endif

/// What a receiver's resume spool writes beside a framed message in the output directory: a copy of its bytes (up to
/// the spool's bound) when the message is long enough to keep a checkpoint, counted against the reserve when the spool
/// is on the output directory's file system (another file system has its own reserve, which the spool keeps itself).
package struct SpooledCopy: Sendable {
    package let spool: ResumeSpool
    package let sameFileSystem: Bool

    /// `nil` without a spool; `directory`: where messages are stored.
    package init?(_ spool: ResumeSpool?, beside directory: String) {
        guard let spool else { return nil }
        self.spool = spool
        var status = stat()
        sameFileSystem = stat(directory, &status) == 0 && spool.device == UInt64(status.st_dev)
    }

    /// The bytes the spool writes for a message of `announced` bytes, in all.
    package func bytes(announced: Int) -> Int {
        guard sameFileSystem, UInt64(max(0, announced)) >= ResumeSpool.minimumCheckpointedLength else { return 0 }
        return min(announced, spool.bounds.maximumBytes)
    }

    /// The bytes it still writes once `received` have come.
    package func bytes(announced: Int, received: Int) -> Int { max(0, bytes(announced: announced) - received) }
}
