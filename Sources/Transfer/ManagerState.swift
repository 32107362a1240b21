/// The state of the Bluetooth stack as a role sees it, mirroring CoreBluetooth's
/// `CBManagerState`. Work (advertising, scanning, transfers) happens only in `poweredOn`.
package enum ManagerState: String, Sendable, Hashable, CaseIterable, Codable {
    /// Not known yet: at start-up, and after bluetoothd (re)appeared until it reported adapters.
    case unknown
    /// bluetoothd is gone (an update is expected when it returns) or the adapter switches power.
    case resetting
    /// No adapter, or the adapter lacks what the role needs (LE; advertising for a peripheral).
    case unsupported
    /// The D-Bus policy refuses us access to org.bluez.
    case unauthorized
    /// The adapter is off, or blocked by rfkill.
    case poweredOff
    case poweredOn
}
