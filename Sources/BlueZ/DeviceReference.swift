import BluetoothModel
import DBus

/// Which remote device BlueZ means: the object path of its org.bluez.Device1
/// (`/org/bluez/hciN/dev_XX_XX_XX_XX_XX_XX`), kept opaque so that code above BlueZ can hold,
/// compare and show a device without speaking D-Bus. `session.device(_:)` turns it into a
/// `Device` while BlueZ still has the device.
public struct DeviceReference: Sendable, Hashable, Comparable, CustomStringConvertible {
    package let path: ObjectPath

    package init(path: ObjectPath) {
        self.path = path
    }

    /// A device object path's text ("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"); nil when it is
    /// not a valid object path.
    package init?(objectPath: String) {
        guard let path = ObjectPath(rawValue: objectPath) else { return nil }
        self.path = path
    }

    /// The address BlueZ wrote into the path, when it did (it does for every device it names
    /// `dev_…`): what to show once the device itself is gone.
    public var address: BluetoothAddress? {
        BluetoothAddress(deviceObjectPath: path.rawValue)
    }

    /// Whether the device hangs below `adapter` (is seen through it).
    public func isOn(_ adapter: Adapter) -> Bool {
        path.isDescendant(of: adapter.path)
    }

    /// The object path, as logs have always shown it.
    public var description: String { path.rawValue }

    public static func < (lhs: DeviceReference, rhs: DeviceReference) -> Bool {
        lhs.path < rhs.path
    }
}
