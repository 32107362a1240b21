/// The finite alphabet of the manager state table: a ``ManagerInput`` classified for a role
/// (an added adapter becomes "ready and on", "lacks LE", … depending on what the role needs).
package enum ManagerEvent: String, Sendable, Hashable, CaseIterable {
    case bluetoothdAppeared
    case bluetoothdVanished
    case adapterReadyPoweredOn
    case adapterReadyPoweredOff
    case adapterReadyRadioBlocked
    case adapterReadyPowerChanging
    case adapterLacksLowEnergy
    case adapterLacksAdvertising
    case adapterGone
    case powerOn
    case powerOff
    case radioBlocked
    case powerChanging
    case accessDenied

    package init(_ input: ManagerInput, requirement: RoleRequirement) {
        switch input {
        case .bluetoothdAppeared:
            self = .bluetoothdAppeared
        case .bluetoothdVanished:
            self = .bluetoothdVanished
        case .adapterRemoved, .noAdapter:
            self = .adapterGone
        case .accessDenied:
            self = .accessDenied
        case .poweredChanged(let powered):
            self = powered ? .powerOn : .powerOff
        case .powerStateChanged(let state):
            switch state {
            case .on: self = .powerOn
            case .off: self = .powerOff
            case .offBlocked: self = .radioBlocked
            case .offEnabling, .onDisabling: self = .powerChanging
            }
        case .adapterAdded(let adapter):
            if !adapter.supportsLowEnergy {
                self = .adapterLacksLowEnergy
            } else if requirement == .peripheral && !adapter.supportsAdvertising {
                self = .adapterLacksAdvertising
            } else {
                switch adapter.powerState {
                case .on: self = .adapterReadyPoweredOn
                case .off: self = .adapterReadyPoweredOff
                case .offBlocked: self = .adapterReadyRadioBlocked
                case .offEnabling, .onDisabling: self = .adapterReadyPowerChanging
                case nil: self = adapter.powered ? .adapterReadyPoweredOn : .adapterReadyPoweredOff
                }
            }
        }
    }

    /// Why the state is what it becomes after this event; nil when it becomes `poweredOn`.
    package var reason: ManagerStateReason? {
        switch self {
        case .bluetoothdAppeared: .awaitingAdapter
        case .bluetoothdVanished: .bluetoothdNotRunning
        case .adapterReadyPoweredOn, .powerOn: nil
        case .adapterReadyPoweredOff, .powerOff: .poweredOff
        case .adapterReadyRadioBlocked, .radioBlocked: .radioBlocked
        case .adapterReadyPowerChanging, .powerChanging: .powerChanging
        case .adapterLacksLowEnergy: .adapterLacksLowEnergy
        case .adapterLacksAdvertising: .adapterLacksAdvertising
        case .adapterGone: .noAdapter
        case .accessDenied: .accessDenied
        }
    }
}

/// The detail behind a state other than `poweredOn`, for a one-line message and an exit status.
package enum ManagerStateReason: String, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    case awaitingAdapter
    case bluetoothdNotRunning
    case noAdapter
    case adapterLacksLowEnergy
    case adapterLacksAdvertising
    case poweredOff
    case radioBlocked
    case powerChanging
    case accessDenied

    package var description: String {
        switch self {
        case .awaitingAdapter: "waiting for bluetoothd to report the adapter"
        case .bluetoothdNotRunning: "bluetoothd is not running"
        case .noAdapter: "no Bluetooth adapter"
        case .adapterLacksLowEnergy: "the Bluetooth adapter does not support Low Energy"
        case .adapterLacksAdvertising: "the Bluetooth adapter cannot advertise (no LEAdvertisingManager1)"
        case .poweredOff: "the Bluetooth adapter is powered off"
        case .radioBlocked: "Bluetooth is blocked by rfkill (airplane mode or a hardware switch)"
        case .powerChanging: "the Bluetooth adapter is switching power"
        case .accessDenied: "access to org.bluez denied by the D-Bus policy"
        }
    }
}
