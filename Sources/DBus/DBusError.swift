import SystemPackage

/// An error reply, or an error we raise with a D-Bus error name; name and message kept exactly as the peer sent them.
package struct DBusError: Error, Sendable, Hashable, CustomStringConvertible {
    package var name: String  // "org.bluez.Error.InProgress"
    package var message: String

    package init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    package var description: String { message.isEmpty ? name : "\(name): \(message)" }

    package static let failedName = "org.freedesktop.DBus.Error.Failed"
    package static let accessDeniedName = "org.freedesktop.DBus.Error.AccessDenied"
    package static let serviceUnknownName = "org.freedesktop.DBus.Error.ServiceUnknown"
    package static let nameHasNoOwnerName = "org.freedesktop.DBus.Error.NameHasNoOwner"
    package static let unknownObjectName = "org.freedesktop.DBus.Error.UnknownObject"
    package static let unknownMethodName = "org.freedesktop.DBus.Error.UnknownMethod"
    package static let unknownInterfaceName = "org.freedesktop.DBus.Error.UnknownInterface"
    package static let unknownPropertyName = "org.freedesktop.DBus.Error.UnknownProperty"
    package static let propertyReadOnlyName = "org.freedesktop.DBus.Error.PropertyReadOnly"
    /// libdbus reports a call that got no reply in time with this name.
    package static let noReplyName = "org.freedesktop.DBus.Error.NoReply"
    package static let timeoutName = "org.freedesktop.DBus.Error.Timeout"
    package static let disconnectedName = "org.freedesktop.DBus.Error.Disconnected"
    package static let invalidArgsName = "org.freedesktop.DBus.Error.InvalidArgs"
    package static let noMemoryName = "org.freedesktop.DBus.Error.NoMemory"

    package static func failed(_ message: String) -> DBusError { DBusError(name: failedName, message: message) }
    package static func invalidArgs(_ message: String) -> DBusError {
        DBusError(name: invalidArgsName, message: message)
    }
    package static func disconnected(_ message: String = "the D-Bus connection is closed") -> DBusError {
        DBusError(name: disconnectedName, message: message)
    }

    package var isAccessDenied: Bool { name == DBusError.accessDeniedName }
    package var isServiceUnknown: Bool {
        name == DBusError.serviceUnknownName || name == DBusError.nameHasNoOwnerName
    }
    package var isDisconnected: Bool { name == DBusError.disconnectedName }
    package var isUnknownObject: Bool { name == DBusError.unknownObjectName }
}
