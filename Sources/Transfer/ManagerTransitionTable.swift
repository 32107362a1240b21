/// The manager state table: for every (state, event) pair, the next state and what the role
/// must do. ``ManagerStateMachine`` only looks things up here; tests check the table is total
/// and agrees with the rules stated in the comments.
///
/// Actions follow one rule: entering `poweredOn` starts the role, leaving it tears the role
/// down, anything else needs nothing.
package enum ManagerTransitionTable {
    package struct Key: Sendable, Hashable {
        package var state: ManagerState
        package var event: ManagerEvent
    }

    package struct Entry: Sendable, Hashable {
        package var next: ManagerState
        /// ``RoleAction/start``, ``RoleAction/tearDown`` or ``RoleAction/none``; the machine turns
        /// a repeated start into ``RoleAction/resume``.
        package var action: RoleAction
        /// The event does not apply in this state; the state and its reason stay as they are.
        package var ignored: Bool
    }

    /// Where each event leads, from any state; `usableOnly`: from a state without a usable adapter
    /// (unknown, unsupported, unauthorized) the event is ignored.
    private static let targets: [(event: ManagerEvent, next: ManagerState, usableOnly: Bool)] = [
        // bluetoothdAppeared: bluetoothd (re)started: whatever we had registered is gone; wait for its adapters.
        (.bluetoothdAppeared, .unknown, false),
        // bluetoothdVanished: CoreBluetooth reports resetting when it loses the system service and expects it back;
        // systemd restarts bluetoothd. A role stuck here reports "bluetoothd is not running".
        (.bluetoothdVanished, .resetting, false),
        // adapterReadyPoweredOn: An adapter event states the whole truth about the adapter, whatever came before.
        (.adapterReadyPoweredOn, .poweredOn, false),
        (.adapterReadyPoweredOff, .poweredOff, false),
        // adapterReadyRadioBlocked: rfkill is the user's or a switch's "radio off", which CoreBluetooth calls poweredOff;
        // unauthorized is kept for permissions. The reason tells the two kinds of off apart.
        (.adapterReadyRadioBlocked, .poweredOff, false),
        // adapterReadyPowerChanging: PowerState off-enabling / on-disabling: an update is imminent.
        (.adapterReadyPowerChanging, .resetting, false),
        (.adapterLacksLowEnergy, .unsupported, false),
        (.adapterLacksAdvertising, .unsupported, false),
        // adapterGone: No adapter: what CoreBluetooth reports on a machine without Bluetooth; here it is
        // recoverable, an adapter event leads out of it.
        (.adapterGone, .unsupported, false),
        // powerOn: Power events mean something only with a usable adapter (poweredOn, poweredOff, resetting);
        // elsewhere they are stale or belong to an adapter we do not use, and are ignored.
        (.powerOn, .poweredOn, true),
        (.powerOff, .poweredOff, true),
        (.radioBlocked, .poweredOff, true),
        (.powerChanging, .resetting, true),
        // accessDenied: Refused by the D-Bus policy, whatever state we were in.
        (.accessDenied, .unauthorized, false),
    ]

    /// Every (state, event) pair, events in `targets`' order, states in `ManagerState`'s.
    package static let rows: [(ManagerState, ManagerEvent, Entry)] = targets.flatMap { target in
        ManagerState.allCases.map { state in
            target.usableOnly && ![.resetting, .poweredOff, .poweredOn].contains(state)
                ? (state, target.event, Entry(next: state, action: .none, ignored: true))
                : row(state, target.event, target.next)
        }
    }

    package static let entries: [Key: Entry] = Dictionary(
        rows.map { (Key(state: $0.0, event: $0.1), $0.2) }, uniquingKeysWith: { first, _ in first })

    package static func entry(from state: ManagerState, on event: ManagerEvent) -> Entry {
        // The table is total (checked by tests); staying put is the safe answer regardless.
        entries[Key(state: state, event: event)] ?? Entry(next: state, action: .none, ignored: true)
    }

    /// The action rule: entering `poweredOn` starts the role, leaving it tears it down.
    private static func row(_ from: ManagerState, _ event: ManagerEvent, _ next: ManagerState) -> (ManagerState, ManagerEvent, Entry) {
        let action: RoleAction = next == .poweredOn && from != .poweredOn ? .start
            : from == .poweredOn && next != .poweredOn ? .tearDown : .none
        return (from, event, Entry(next: next, action: action, ignored: false))
    }
}
