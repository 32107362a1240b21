import DBus

/// What an error reply from bluetoothd (or the bus on its behalf) means, as a type: the names
/// of BlueZ 5.66's doc/*-api.txt (org.bluez.Error.*) and the few D-Bus errors a call to
/// org.bluez can meet. Callers match cases instead of comparing name strings; a name this
/// build does not know stays readable as `.other`.
public enum BlueZErrorKind: Hashable, Sendable {
    case inProgress
    case failed
    case alreadyConnected
    case notConnected
    case notReady
    case notPermitted
    case notSupported
    case notAuthorized
    case doesNotExist
    case alreadyExists
    case invalidArguments
    case invalidOffset
    case invalidValueLength
    /// org.bluez.Error.InvalidLength: an advertisement that does not fit.
    case invalidLength
    case connectionAttemptFailed
    /// org.freedesktop.DBus.Error.InvalidArgs: a property or interface the object lacks.
    case dbusInvalidArguments
    /// org.freedesktop.DBus.Error.UnknownInterface / UnknownObject / UnknownMethod.
    case dbusUnknownInterface
    case dbusUnknownObject
    /// org.freedesktop.DBus.Error.NoReply / Timeout: bluetoothd did not answer in time.
    case dbusNoReply
    case dbusTimeout
    /// Any other name, kept as sent.
    case other(String)

    private static let byName: [String: BlueZErrorKind] = [
        "org.bluez.Error.InProgress": .inProgress,
        "org.bluez.Error.Failed": .failed,
        "org.bluez.Error.AlreadyConnected": .alreadyConnected,
        "org.bluez.Error.NotConnected": .notConnected,
        "org.bluez.Error.NotReady": .notReady,
        "org.bluez.Error.NotPermitted": .notPermitted,
        "org.bluez.Error.NotSupported": .notSupported,
        "org.bluez.Error.NotAuthorized": .notAuthorized,
        "org.bluez.Error.DoesNotExist": .doesNotExist,
        "org.bluez.Error.AlreadyExists": .alreadyExists,
        "org.bluez.Error.InvalidArguments": .invalidArguments,
        "org.bluez.Error.InvalidOffset": .invalidOffset,
        "org.bluez.Error.InvalidValueLength": .invalidValueLength,
        "org.bluez.Error.InvalidLength": .invalidLength,
        "org.bluez.Error.ConnectionAttemptFailed": .connectionAttemptFailed,
        DBusError.invalidArgsName: .dbusInvalidArguments,
        DBusError.unknownInterfaceName: .dbusUnknownInterface,
        DBusError.unknownObjectName: .dbusUnknownObject,
        DBusError.noReplyName: .dbusNoReply,
        DBusError.timeoutName: .dbusTimeout,
    ]

    private static let names: [BlueZErrorKind: String] = Dictionary(
        uniqueKeysWithValues: byName.map { ($0.value, $0.key) })

    /// The kind an error reply's name stands for.
    public init(errorName: String) {
        self = Self.byName[errorName] ?? .other(errorName)
    }

    /// The D-Bus error name, as bluetoothd sends it (and as messages show it).
    public var errorName: String {
        if case .other(let name) = self { return name }
        return Self.names[self] ?? "\(self)"
    }
}
