import Machines

/// Process exit statuses, after sysexits(3), so scripts and systemd can tell failures apart.
package enum ExitStatus: Int32, Sendable, CaseIterable {
    case success = 0
    /// The command line was wrong: unknown option, malformed UUID, conflicting flags.
    case usage = 64
    /// A message arrived but failed verification (digest, length, framing).
    case dataError = 65
    /// An input file does not exist or cannot be read.
    case noInput = 66
    /// Bluetooth is not usable: no adapter, adapter without LE, bluetoothd absent, adapter off.
    case unavailable = 69
    /// A bug: something that should not happen did.
    case software = 70
    /// An output file or directory cannot be created (or exists and must not be replaced).
    case cannotCreate = 73
    /// Reading or writing a local file failed (disk full, permission on the output directory).
    case ioError = 74
    /// The deadline given with --timeout passed.
    case timedOut = 75
    /// The D-Bus policy or file permissions deny access.
    case permissionDenied = 77
    /// The configuration cannot work: a daemon without an identity or authorized peers.
    case configuration = 78
}

extension ExitStatus {
    /// The failure kind ending with this status (`FailureKind`'s raw value: the case's name), as `error`'s `kind`.
    package var failureKindName: String { String(describing: self) }

    /// The status of the kind's name (`failureKindName` is the way back). Every `FailureKind` has one, as
    /// CommandLineVoiceTests checks; a kind added without one would be a bug, so it ends as `software`, not a trap.
    package init(_ kind: FailureKind) {
        self = Self.allCases.first { $0.failureKindName == kind.rawValue } ?? .software
    }
}
