import BlueZ

extension DeviceReference {
    /// The device at `objectPath`, for tests that drive the peripheral's server without BlueZ.
    static func named(_ objectPath: String) -> DeviceReference {
        guard let reference = DeviceReference(objectPath: objectPath) else {
            preconditionFailure("not an object path: \(objectPath)")
        }
        return reference
    }
}
