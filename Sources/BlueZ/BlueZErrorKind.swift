import DBus

/// What an error reply from bluetoothd (or the bus on its behalf) means, as a type: the names of BlueZ 5.66's
/// doc/*-api.txt (org.bluez.Error.*) and the few D-Bus errors a call to org.bluez can meet. Callers match cases, not
/// name strings; a name this build does not know stays as `.other`.
public enum BlueZErrorKind: Hashable, Sendable {
    case inProgress, failed, alreadyConnected, notConnected, notReady, notPermitted, notSupported, notAuthorized
    case doesNotExist, alreadyExists, invalidArguments, invalidOffset, invalidValueLength
    case invalidLength  // an advertisement that does not fit
    case connectionAttemptFailed
    /// org.freedesktop.DBus.Error.InvalidArgs: a property or interface the object lacks.
    case dbusInvalidArguments
    case dbusUnknownInterface, dbusUnknownObject
    /// NoReply / Timeout: bluetoothd did not answer in time.
    case dbusNoReply, dbusTimeout
    case other(String)  // any other name, kept as sent

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

    public init(errorName: String) {
        self = Self.byName[errorName] ?? .other(errorName)
    }

    /// As bluetoothd sends it (and messages show it).
    public var errorName: String {
        if case .other(let name) = self { return name }
        return Self.byName.first { $0.value == self }?.key ?? "\(self)"
    }
}
