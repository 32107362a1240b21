import BlueZ
import Transfer

/// The manager state each role would be in, given what `status` saw: the roles' state machine fed the report once.
enum StatusManagerState {
    static func state(for requirement: RoleRequirement, report: BluetoothStatusReport) -> ManagerState {
        var machine = ManagerStateMachine(role: requirement)
        for input in inputs(from: report) {
            _ = machine.handle(input)
        }
        return machine.state
    }

    static func inputs(from report: BluetoothStatusReport) -> [ManagerInput] {
        switch report.bluetoothd {
        case "access-denied": return [.accessDenied]
        case "running":
            guard let selected = report.selectedAdapter,
                  let adapter = report.adapters.first(where: { $0.name == selected })
            else { return [.bluetoothdAppeared, .noAdapter] }
            let capabilities = AdapterCapabilities(
                supportsLowEnergy: adapter.supportsLowEnergy, supportsAdvertising: adapter.supportsAdvertising,
                powered: adapter.powered, powerState: adapter.powerState.flatMap(AdapterPowerState.init(rawValue:)))
            return [.bluetoothdAppeared, .adapterAdded(capabilities)]
        default:
            // bluetoothd not running, or no system bus: nothing has been heard from BlueZ, so
            // the state stays unknown (a role that saw bluetoothd go away says resetting).
            return []
        }
    }
}
