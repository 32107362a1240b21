import SystemPackage

/// An error reply, or an error we raise with a D-Bus error name. Name and message are kept
/// exactly as the peer sent them, so callers can map them to states and retries.
public struct DBusError: Error, Sendable, Hashable, CustomStringConvertible {
    /// "org.bluez.Error.InProgress"
    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    public static let failedName = "org.freedesktop.DBus.Error.Failed"
    public static let accessDeniedName = "org.freedesktop.DBus.Error.AccessDenied"
    public static let serviceUnknownName = "org.freedesktop.DBus.Error.ServiceUnknown"
    public static let nameHasNoOwnerName = "org.freedesktop.DBus.Error.NameHasNoOwner"
    public static let unknownObjectName = "org.freedesktop.DBus.Error.UnknownObject"
    public static let unknownMethodName = "org.freedesktop.DBus.Error.UnknownMethod"
    public static let unknownInterfaceName = "org.freedesktop.DBus.Error.UnknownInterface"
    public static let unknownPropertyName = "org.freedesktop.DBus.Error.UnknownProperty"
    public static let propertyReadOnlyName = "org.freedesktop.DBus.Error.PropertyReadOnly"
    /// libdbus reports a call that got no reply in time with this name.
    public static let noReplyName = "org.freedesktop.DBus.Error.NoReply"
    public static let timeoutName = "org.freedesktop.DBus.Error.Timeout"
    public static let disconnectedName = "org.freedesktop.DBus.Error.Disconnected"
    public static let invalidArgsName = "org.freedesktop.DBus.Error.InvalidArgs"
    public static let invalidSignatureName = "org.freedesktop.DBus.Error.InvalidSignature"
    public static let noMemoryName = "org.freedesktop.DBus.Error.NoMemory"
    public static let matchRuleInvalidName = "org.freedesktop.DBus.Error.MatchRuleInvalid"

    public static func failed(_ message: String) -> DBusError { DBusError(name: failedName, message: message) }
    public static func invalidArgs(_ message: String) -> DBusError {
        DBusError(name: invalidArgsName, message: message)
    }
    public static func disconnected(_ message: String = "the D-Bus connection is closed") -> DBusError {
        DBusError(name: disconnectedName, message: message)
    }

    public var isAccessDenied: Bool { name == DBusError.accessDeniedName }
    public var isServiceUnknown: Bool {
        name == DBusError.serviceUnknownName || name == DBusError.nameHasNoOwnerName
    }
    /// A call that got no reply in time (our timeout or the peer's).
    public var isTimeout: Bool { name == DBusError.timeoutName || name == DBusError.noReplyName }
    public var isDisconnected: Bool { name == DBusError.disconnectedName }
    public var isUnknownObject: Bool { name == DBusError.unknownObjectName }
    public var isUnknownMethod: Bool { name == DBusError.unknownMethodName }
}
