import Machines

/// Room on disk for the messages of a visit, checked as they come: a framed message once,
/// with the length its header announces, before any payload is taken; a compat one (no
/// length) about once a second with what has come so far. Refused, the link is dropped before
/// EOM: the sender keeps its copy.
package struct AdmissionCheck: Sendable {
    private var admittedAnnouncement = false
    private var lastCheck: Duration?

    package init() {}

    package mutating func check(_ assembly: MessageAssembly, at now: Duration, sink: any MessageSink) throws {
        guard !assembly.finished else { return }
        var checked: Int?
        if let announced = assembly.announcedLength, !admittedAnnouncement {
            admittedAnnouncement = true
            checked = announced
        } else if assembly.announcedLength == nil, lastCheck.map({ now - $0 >= .seconds(1) }) ?? true {
            lastCheck = now
            checked = assembly.bytesReceived
        }
        if let checked, let refusal = sink.admissionRefusal(byteCount: checked) {
            throw TransferFailure.refused(bound: refusal.bound.rawValue, reason: refusal.reason)
        }
    }

    /// The next message of the session announces its own length.
    package mutating func nextMessage() {
        admittedAnnouncement = false
    }
}
