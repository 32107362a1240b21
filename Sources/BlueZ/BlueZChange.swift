import DBus

/// Whether bluetoothd can be used, as far as the session knows.
public enum BluetoothServiceState: Sendable, Equatable, CustomStringConvertible {
    /// org.bluez is owned (by this unique name) and answered GetManagedObjects.
    case running(owner: String)
    case notRunning  // nobody owns org.bluez
    case accessDenied(String)  // org.bluez exists but the D-Bus policy refuses us
    case busDisconnected  // our connection to the system bus was lost; the session is finished

    public var isRunning: Bool {
        if case .running = self { true } else { false }
    }

    public var description: String {
        switch self {
        case .running(let owner): return "running (\(owner))"
        case .notRunning: return "not running"
        case .accessDenied: return "access denied"
        case .busDisconnected: return "system bus disconnected"
        }
    }
}

/// A change to the session's view of org.bluez, in D-Bus terms, after it was applied to the cache (so reading the cache
/// while handling it sees the new state). For BlueZ's own waits and the tests; code above BlueZ gets typed streams
/// such as `deviceDepartures(on:)` and `adapterEvents`.
package enum BlueZChange: Sendable, Equatable {
    case serviceAppeared  // bluetoothd (re)appeared and the cache was reloaded from GetManagedObjects
    case serviceVanished  // bluetoothd went away (or the bus did); the cache is now empty
    case accessDenied(String)  // the policy refused GetManagedObjects; the cache is empty
    case interfacesAdded(ObjectPath, [String: [String: DBusValue]])
    case interfacesRemoved(ObjectPath, [String])
    case propertiesChanged(ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String])

    package var path: ObjectPath? {
        switch self {
        case .interfacesAdded(let path, _), .interfacesRemoved(let path, _),
            .propertiesChanged(let path, _, _, _):
            return path
        default:
            return nil
        }
    }
}
