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

    package static let rows: [(ManagerState, ManagerEvent, Entry)] = [
        // bluetoothdAppeared: bluetoothd (re)started: whatever we had registered is gone; wait for its adapters.
        row(.unknown, .bluetoothdAppeared, .unknown, .none),
        row(.resetting, .bluetoothdAppeared, .unknown, .none),
        row(.unsupported, .bluetoothdAppeared, .unknown, .none),
        row(.unauthorized, .bluetoothdAppeared, .unknown, .none),
        row(.poweredOff, .bluetoothdAppeared, .unknown, .none),
        row(.poweredOn, .bluetoothdAppeared, .unknown, .tearDown),

        // bluetoothdVanished: CoreBluetooth reports resetting when it loses the system service and expects it back;
        // systemd restarts bluetoothd. A role stuck here reports "bluetoothd is not running".
        row(.unknown, .bluetoothdVanished, .resetting, .none),
        row(.resetting, .bluetoothdVanished, .resetting, .none),
        row(.unsupported, .bluetoothdVanished, .resetting, .none),
        row(.unauthorized, .bluetoothdVanished, .resetting, .none),
        row(.poweredOff, .bluetoothdVanished, .resetting, .none),
        row(.poweredOn, .bluetoothdVanished, .resetting, .tearDown),

        // adapterReadyPoweredOn: An adapter event states the whole truth about the adapter, whatever came before.
        row(.unknown, .adapterReadyPoweredOn, .poweredOn, .start),
        row(.resetting, .adapterReadyPoweredOn, .poweredOn, .start),
        row(.unsupported, .adapterReadyPoweredOn, .poweredOn, .start),
        row(.unauthorized, .adapterReadyPoweredOn, .poweredOn, .start),
        row(.poweredOff, .adapterReadyPoweredOn, .poweredOn, .start),
        row(.poweredOn, .adapterReadyPoweredOn, .poweredOn, .none),

        // adapterReadyPoweredOff
        row(.unknown, .adapterReadyPoweredOff, .poweredOff, .none),
        row(.resetting, .adapterReadyPoweredOff, .poweredOff, .none),
        row(.unsupported, .adapterReadyPoweredOff, .poweredOff, .none),
        row(.unauthorized, .adapterReadyPoweredOff, .poweredOff, .none),
        row(.poweredOff, .adapterReadyPoweredOff, .poweredOff, .none),
        row(.poweredOn, .adapterReadyPoweredOff, .poweredOff, .tearDown),

        // adapterReadyRadioBlocked: rfkill is the user's or a switch's "radio off", which CoreBluetooth calls poweredOff;
        // unauthorized is kept for permissions. The reason tells the two kinds of off apart.
        row(.unknown, .adapterReadyRadioBlocked, .poweredOff, .none),
        row(.resetting, .adapterReadyRadioBlocked, .poweredOff, .none),
        row(.unsupported, .adapterReadyRadioBlocked, .poweredOff, .none),
        row(.unauthorized, .adapterReadyRadioBlocked, .poweredOff, .none),
        row(.poweredOff, .adapterReadyRadioBlocked, .poweredOff, .none),
        row(.poweredOn, .adapterReadyRadioBlocked, .poweredOff, .tearDown),

        // adapterReadyPowerChanging: PowerState off-enabling / on-disabling: an update is imminent.
        row(.unknown, .adapterReadyPowerChanging, .resetting, .none),
        row(.resetting, .adapterReadyPowerChanging, .resetting, .none),
        row(.unsupported, .adapterReadyPowerChanging, .resetting, .none),
        row(.unauthorized, .adapterReadyPowerChanging, .resetting, .none),
        row(.poweredOff, .adapterReadyPowerChanging, .resetting, .none),
        row(.poweredOn, .adapterReadyPowerChanging, .resetting, .tearDown),

        // adapterLacksLowEnergy
        row(.unknown, .adapterLacksLowEnergy, .unsupported, .none),
        row(.resetting, .adapterLacksLowEnergy, .unsupported, .none),
        row(.unsupported, .adapterLacksLowEnergy, .unsupported, .none),
        row(.unauthorized, .adapterLacksLowEnergy, .unsupported, .none),
        row(.poweredOff, .adapterLacksLowEnergy, .unsupported, .none),
        row(.poweredOn, .adapterLacksLowEnergy, .unsupported, .tearDown),

        // adapterLacksAdvertising
        row(.unknown, .adapterLacksAdvertising, .unsupported, .none),
        row(.resetting, .adapterLacksAdvertising, .unsupported, .none),
        row(.unsupported, .adapterLacksAdvertising, .unsupported, .none),
        row(.unauthorized, .adapterLacksAdvertising, .unsupported, .none),
        row(.poweredOff, .adapterLacksAdvertising, .unsupported, .none),
        row(.poweredOn, .adapterLacksAdvertising, .unsupported, .tearDown),

        // adapterGone: No adapter: what CoreBluetooth reports on a machine without Bluetooth; here it is
        // recoverable, an adapter event leads out of it.
        row(.unknown, .adapterGone, .unsupported, .none),
        row(.resetting, .adapterGone, .unsupported, .none),
        row(.unsupported, .adapterGone, .unsupported, .none),
        row(.unauthorized, .adapterGone, .unsupported, .none),
        row(.poweredOff, .adapterGone, .unsupported, .none),
        row(.poweredOn, .adapterGone, .unsupported, .tearDown),

        // powerOn: Power events mean something only with a usable adapter (poweredOn, poweredOff, resetting);
        // elsewhere they are stale or belong to an adapter we do not use, and are ignored.
        ignore(.unknown, .powerOn),
        row(.resetting, .powerOn, .poweredOn, .start),
        ignore(.unsupported, .powerOn),
        ignore(.unauthorized, .powerOn),
        row(.poweredOff, .powerOn, .poweredOn, .start),
        row(.poweredOn, .powerOn, .poweredOn, .none),

        // powerOff
        ignore(.unknown, .powerOff),
        row(.resetting, .powerOff, .poweredOff, .none),
        ignore(.unsupported, .powerOff),
        ignore(.unauthorized, .powerOff),
        row(.poweredOff, .powerOff, .poweredOff, .none),
        row(.poweredOn, .powerOff, .poweredOff, .tearDown),

        // radioBlocked
        ignore(.unknown, .radioBlocked),
        row(.resetting, .radioBlocked, .poweredOff, .none),
        ignore(.unsupported, .radioBlocked),
        ignore(.unauthorized, .radioBlocked),
        row(.poweredOff, .radioBlocked, .poweredOff, .none),
        row(.poweredOn, .radioBlocked, .poweredOff, .tearDown),

        // powerChanging
        ignore(.unknown, .powerChanging),
        row(.resetting, .powerChanging, .resetting, .none),
        ignore(.unsupported, .powerChanging),
        ignore(.unauthorized, .powerChanging),
        row(.poweredOff, .powerChanging, .resetting, .none),
        row(.poweredOn, .powerChanging, .resetting, .tearDown),

        // accessDenied: Refused by the D-Bus policy, whatever state we were in.
        row(.unknown, .accessDenied, .unauthorized, .none),
        row(.resetting, .accessDenied, .unauthorized, .none),
        row(.unsupported, .accessDenied, .unauthorized, .none),
        row(.unauthorized, .accessDenied, .unauthorized, .none),
        row(.poweredOff, .accessDenied, .unauthorized, .none),
        row(.poweredOn, .accessDenied, .unauthorized, .tearDown),
    ]

    package static let entries: [Key: Entry] = Dictionary(
        rows.map { (Key(state: $0.0, event: $0.1), $0.2) }, uniquingKeysWith: { first, _ in first })

    package static func entry(from state: ManagerState, on event: ManagerEvent) -> Entry {
        // The table is total (checked by tests); staying put is the safe answer regardless.
        entries[Key(state: state, event: event)] ?? Entry(next: state, action: .none, ignored: true)
    }

    private static func row(
        _ from: ManagerState, _ event: ManagerEvent, _ next: ManagerState, _ action: RoleAction
    ) -> (ManagerState, ManagerEvent, Entry) {
        (from, event, Entry(next: next, action: action, ignored: false))
    }

    private static func ignore(_ state: ManagerState, _ event: ManagerEvent) -> (ManagerState, ManagerEvent, Entry) {
        (state, event, Entry(next: state, action: .none, ignored: true))
    }
}
