#if canImport(Glibc)
import Glibc
#endif
import Machines

/// Room on disk for the messages of a visit, checked as they come: a framed message once,
/// with the length its header announces (and the resume spool's copy of it), before any
/// payload is taken, then the reserve again before each of its writes (others fill the disk
/// too); a compat one (no length, held in memory until it is whole) about once a second with
/// what has come so far. Refused, the link is dropped before EOM: the sender keeps its copy.
package struct AdmissionCheck: Sendable {
    private var admittedAnnouncement = false
    private var lastCheck: Duration?

    package init() {}

    package mutating func check(_ assembly: MessageAssembly, at now: Duration, sink: any MessageSink) throws {
        guard !assembly.finished else { return }
        var refusal: StorageRefusal?
        if let announced = assembly.announcedLength {
            if !admittedAnnouncement {
                admittedAnnouncement = true
                refusal = sink.admissionRefusal(announced: announced)
            } else {
                refusal = sink.writeRefusal(announced: announced, received: assembly.bytesReceived)
            }
        } else if lastCheck.map({ now - $0 >= .seconds(1) }) ?? true {
            lastCheck = now
            refusal = sink.admissionRefusal(byteCount: assembly.bytesReceived)
        }
        if let refusal {
            throw TransferFailure.refused(bound: refusal.bound.rawValue, reason: refusal.reason)
        }
    }

    /// The next message of the session announces its own length.
    package mutating func nextMessage() {
        admittedAnnouncement = false
    }
}

/// What a receiver's resume spool writes beside a framed message in the output directory: a
/// copy of its bytes (up to the spool's bound) when the message is long enough to keep a
/// checkpoint, counted against the reserve when the spool is on the output directory's file
/// system (a second file system has a reserve of its own, which the spool keeps itself).
public struct SpooledCopy: Sendable {
    public let spool: ResumeSpool
    public let sameFileSystem: Bool

    /// `nil` without a spool; `directory`: where messages are stored.
    public init?(_ spool: ResumeSpool?, beside directory: String) {
        guard let spool else { return nil }
        self.spool = spool
        var status = stat()
        sameFileSystem = stat(directory, &status) == 0 && spool.device == UInt64(status.st_dev)
    }

    /// The bytes the spool writes for a message of `announced` bytes, in all.
    public func bytes(announced: Int) -> Int {
        guard sameFileSystem, UInt64(max(0, announced)) >= ResumeSpool.minimumCheckpointedLength else { return 0 }
        return min(announced, spool.bounds.maximumBytes)
    }

    /// The bytes it still writes once `received` have come.
    public func bytes(announced: Int, received: Int) -> Int {
        max(0, bytes(announced: announced) - received)
    }
}
