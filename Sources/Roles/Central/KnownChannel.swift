import BlueZ

/// A sender's L2CAP channel as its last visit found it: the PSM its service published, the characteristic resolved.
struct KnownChannel: Sendable {
    var psm: UInt16
    var characteristic: RemoteGATTCharacteristic
}
