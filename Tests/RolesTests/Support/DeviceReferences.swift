import BlueZ
import DBus

extension DeviceReference {
    /// The device at `objectPath`, for tests that drive the peripheral's server without BlueZ.
    static func named(_ objectPath: String) -> DeviceReference {
        guard let path = ObjectPath(rawValue: objectPath) else {
            preconditionFailure("not an object path: \(objectPath)")
        }
        return DeviceReference(path: path)
    }
}
