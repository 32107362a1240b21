/// What a role observes of bluetoothd and its one adapter (only that one's events), fed to ``ManagerStateMachine``.
package enum ManagerInput: Sendable, Hashable {
    /// org.bluez got an owner on the bus (start-up or restart).
    case bluetoothdAppeared
    /// org.bluez lost its owner, or was never there.
    case bluetoothdVanished
    /// The adapter appeared (or was found when enumerating).
    case adapterAdded(AdapterCapabilities)
    /// The adapter went away (InterfacesRemoved for Adapter1).
    case adapterRemoved
    /// bluetoothd runs but has no adapter (or none with the name asked for).
    case noAdapter
    /// Adapter1.Powered changed.
    case poweredChanged(Bool)
    /// Adapter1.PowerState changed (BlueZ 5.66 and later).
    case powerStateChanged(AdapterPowerState)
    /// A call to org.bluez failed with org.freedesktop.DBus.Error.AccessDenied.
    case accessDenied
}

package struct AdapterCapabilities: Sendable, Hashable {
    /// The adapter speaks LE (Adapter1 `Roles` present / LE settings supported).
    package var supportsLowEnergy: Bool
    /// The adapter offers LEAdvertisingManager1.
    package var supportsAdvertising: Bool
    package var powered: Bool
    /// Adapter1.PowerState when BlueZ reports it; refines `powered` (rfkill, transitions).
    package var powerState: AdapterPowerState?

    package init(supportsLowEnergy: Bool, supportsAdvertising: Bool, powered: Bool, powerState: AdapterPowerState? = nil) {
        self.supportsLowEnergy = supportsLowEnergy
        self.supportsAdvertising = supportsAdvertising
        self.powered = powered
        self.powerState = powerState
    }
}

/// Which role the state machine serves: a peripheral must advertise, a central only scans.
package enum RoleRequirement: String, Sendable, Hashable, CaseIterable, Codable {
    /// Needs LE and LEAdvertisingManager1.
    case peripheral
    /// Needs LE.
    case central
}
