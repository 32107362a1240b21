import DBus

/// Everything the BlueZ layer throws (besides `CancellationError` and `NotificationSocketError`), each with a one-line
/// description a user can act on.
public enum BluetoothError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No system bus to talk to (no socket, daemon down, DBUS_SYSTEM_BUS_ADDRESS wrong).
    case systemBusUnavailable(String)
    case bluetoothdNotRunning  // org.bluez has no owner on the bus
    case accessDenied(String)  // the D-Bus policy does not let this user talk to org.bluez
    case noAdapter  // bluetoothd runs but has no adapter
    case unknownAdapter(name: String, available: [String])
    /// The object (adapter, device, service, characteristic) is gone from BlueZ's tree.
    case objectGone(String)
    case notFound(String)  // no characteristic / service with that UUID under the device
    case deviceDisconnected(String)  // while we waited for it
    case timedOut(String)  // a deadline we were given passed
    /// Any other error reply: what its name means, and its message.
    case bluez(BlueZErrorKind, message: String)

    public var description: String {
        switch self {
        case .systemBusUnavailable(let message):
            return "cannot reach the D-Bus system bus (\(message))"
        case .bluetoothdNotRunning:
            // One wording everywhere: status, the roles' start, the daemon's log.
            return "bluetoothd is not running"
        case .accessDenied(let message):
            let detail = message.isEmpty ? "" : " (\(message))"
            return "permission denied: the D-Bus policy does not let this user use org.bluez\(detail)"
        case .noAdapter:
            return "no Bluetooth adapter: bluetoothd reports none"
        case .unknownAdapter(let name, let available):
            let list = available.isEmpty ? "none" : available.joined(separator: ", ")
            return "no adapter named '\(name)' (adapters present: \(list))"
        case .objectGone(let what):
            return "\(what) is gone"
        case .notFound(let what):
            return "not found: \(what)"
        case .deviceDisconnected(let device):
            return "device \(device) disconnected"
        case .timedOut(let what):
            return "timed out: \(what)"
        case .bluez(let kind, let message):
            return message.isEmpty ? kind.errorName : "\(kind.errorName): \(message)"
        }
    }

    /// A `Device1.Connect` failure worth retrying after a short back-off: another connect is under way (`InProgress`),
    /// or the controller aborted the attempt (`Failed: le-connection-abort-by-local`, `br-connection-*`, "Software
    /// caused connection abort"), as BlueZ reports collisions with scanning and busy links.
    public var isTransientConnectFailure: Bool {
        guard case .bluez(let kind, let message) = self else {
            if case .timedOut = self { return true }
            return false
        }
        switch kind {
        case .inProgress, .notReady, .connectionAttemptFailed, .dbusNoReply, .dbusTimeout:
            return true
        case .failed:
            let lowered = message.lowercased()
            return lowered.contains("le-connection-abort-by-local")
                || lowered.contains("br-connection-")
                || lowered.contains("software caused connection abort")
                || lowered.contains("connection-canceled")
                || lowered.contains("timeout")
                || lowered.contains("connection timed out")
        default:
            return false
        }
    }

    public static func from(_ error: any Error) -> any Error {
        if let mapped = error as? BluetoothError { return mapped }
        guard let dbus = error as? DBusError else { return error }
        if dbus.isServiceUnknown || dbus.name == "org.freedesktop.DBus.Error.Spawn.ServiceNotFound" {
            return BluetoothError.bluetoothdNotRunning
        }
        if dbus.isAccessDenied {
            return BluetoothError.accessDenied(dbus.message)
        }
        if dbus.isDisconnected {
            return BluetoothError.systemBusUnavailable(dbus.message.isEmpty ? "disconnected" : dbus.message)
        }
        if dbus.isUnknownObject {
            return BluetoothError.objectGone(dbus.message.isEmpty ? "object" : dbus.message)
        }
        return BluetoothError.bluez(BlueZErrorKind(errorName: dbus.name), message: dbus.message)
    }
}
