/// What kind of failure stopped a role: one exit status each (`ExitStatus`); a daemon decides by it whether to retry.
package enum FailureKind: String, Sendable, Equatable, CaseIterable {
    /// The user asked for something impossible: unknown adapter, malformed UUID, bad flags.
    case usage
    /// A message arrived but failed verification.
    case dataError
    /// An input file is missing or unreadable.
    case noInput
    /// Bluetooth cannot be used: no adapter, no LE, bluetoothd absent, adapter off for good.
    case unavailable
    /// A bug.
    case software
    case ioError
    case timedOut
    /// An output file or directory cannot be created, or exists and must not be replaced.
    case cannotCreate
    /// D-Bus policy or file permissions deny access.
    case permissionDenied
    /// The configuration cannot work: a daemon without identity or authorized peers (and no --insecure-any-peer).
    case configuration
}

package protocol ClassifiedFailure: Error, Sendable {
    var kind: FailureKind { get }
    /// One line, no trailing period, says what happened and, where it helps, what to do.
    var userMessage: String { get }
}

package struct RoleFailure: ClassifiedFailure, CustomStringConvertible {
    package var kind: FailureKind
    package var userMessage: String

    package init(_ kind: FailureKind, _ userMessage: String) {
        self.kind = kind
        self.userMessage = userMessage
    }

    package var description: String { userMessage }
}
