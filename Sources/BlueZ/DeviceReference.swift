import BluetoothModel
import DBus

/// Which remote device BlueZ means: its Device1's object path, opaque so code above BlueZ can hold, compare and show a
/// device without speaking D-Bus. `session.device(_:)` makes it a `Device` while BlueZ still has the device.
public struct DeviceReference: Sendable, Hashable, Comparable, CustomStringConvertible {
    package let path: ObjectPath

    package init(path: ObjectPath) {
        self.path = path
    }

    /// The address BlueZ wrote into the path (it does for every `dev_…`): what to show once the device is gone.
    public var address: BluetoothAddress? { BluetoothAddress(deviceObjectPath: path.rawValue) }

    /// The object path, as logs have always shown it.
    public var description: String { path.rawValue }

    public static func < (lhs: DeviceReference, rhs: DeviceReference) -> Bool {
        lhs.path < rhs.path
    }
}
