import Testing
@testable import Transfer

@Suite struct ManagerStateMachineTests {
    static let usableOn = AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: true)
    static let usableOff = AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: false)

    /// Inputs that reach each state from a fresh machine.
    static let pathTo: [ManagerState: [ManagerInput]] = [
        .unknown: [],
        .resetting: [.bluetoothdVanished],
        .unsupported: [.noAdapter],
        .unauthorized: [.accessDenied],
        .poweredOff: [.adapterAdded(usableOff)],
        .poweredOn: [.adapterAdded(usableOn)],
    ]

    /// Every input that classifies to each event, for a peripheral.
    static let inputsFor: [ManagerEvent: [ManagerInput]] = [
        .bluetoothdAppeared: [.bluetoothdAppeared],
        .bluetoothdVanished: [.bluetoothdVanished],
        .adapterReadyPoweredOn: [
            .adapterAdded(usableOn),
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: false, powerState: .on)),
        ],
        .adapterReadyPoweredOff: [
            .adapterAdded(usableOff),
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: true, powerState: .off)),
        ],
        .adapterReadyRadioBlocked: [
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: false, powerState: .offBlocked)),
        ],
        .adapterReadyPowerChanging: [
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: false, powerState: .offEnabling)),
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: true, powered: true, powerState: .onDisabling)),
        ],
        .adapterLacksLowEnergy: [
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: false, supportsAdvertising: true, powered: true)),
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: false, supportsAdvertising: false, powered: false)),
        ],
        .adapterLacksAdvertising: [
            .adapterAdded(AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: false, powered: true)),
        ],
        .adapterGone: [.adapterRemoved, .noAdapter],
        .powerOn: [.poweredChanged(true), .powerStateChanged(.on)],
        .powerOff: [.poweredChanged(false), .powerStateChanged(.off)],
        .radioBlocked: [.powerStateChanged(.offBlocked)],
        .powerChanging: [.powerStateChanged(.offEnabling), .powerStateChanged(.onDisabling)],
        .accessDenied: [.accessDenied],
    ]

    /// The rules of the table, stated independently of it.
    static func expectedNext(from state: ManagerState, on event: ManagerEvent) -> ManagerState {
        let adapterUsable: Set<ManagerState> = [.poweredOn, .poweredOff, .resetting]
        switch event {
        case .bluetoothdAppeared: return .unknown
        case .bluetoothdVanished, .adapterReadyPowerChanging: return .resetting
        case .adapterReadyPoweredOn: return .poweredOn
        case .adapterReadyPoweredOff, .adapterReadyRadioBlocked: return .poweredOff
        case .adapterLacksLowEnergy, .adapterLacksAdvertising, .adapterGone: return .unsupported
        case .accessDenied: return .unauthorized
        case .powerOn: return adapterUsable.contains(state) ? .poweredOn : state
        case .powerOff, .radioBlocked: return adapterUsable.contains(state) ? .poweredOff : state
        case .powerChanging: return adapterUsable.contains(state) ? .resetting : state
        }
    }

    @Test func tableIsTotalAndHasNoDuplicates() {
        let keys = ManagerTransitionTable.rows.map { ManagerTransitionTable.Key(state: $0.0, event: $0.1) }
        #expect(keys.count == ManagerState.allCases.count * ManagerEvent.allCases.count)
        #expect(Set(keys).count == keys.count)
    }

    @Test func everyRowFollowsTheRulesAndTheActionRule() {
        for (from, event, entry) in ManagerTransitionTable.rows {
            #expect(entry.next == Self.expectedNext(from: from, on: event), "\(from) on \(event)")
            let expectedAction: RoleAction =
                entry.next == .poweredOn && from != .poweredOn ? .start
                : from == .poweredOn && entry.next != .poweredOn ? .tearDown : .none
            #expect(entry.action == expectedAction, "\(from) on \(event)")
            if entry.ignored { #expect(entry.next == from) }
        }
    }

    /// Every (state, event) pair, reached and triggered through real inputs, for both roles.
    @Test(arguments: ManagerState.allCases)
    func everyTransitionThroughRealInputs(from: ManagerState) throws {
        for (event, inputs) in Self.inputsFor {
            for input in inputs {
                var machine = ManagerStateMachine(role: .peripheral)
                for step in Self.pathTo[from]! { machine.handle(step) }
                try #require(machine.state == from)
                let startedBefore = machine.hasStarted
                let transition = machine.handle(input)
                let entry = ManagerTransitionTable.entry(from: from, on: event)

                #expect(transition.event == event, "\(input)")
                #expect(transition.from == from)
                #expect(transition.to == Self.expectedNext(from: from, on: event), "\(from) on \(input)")
                #expect(machine.state == transition.to)
                let expectedAction = entry.action == .start && startedBefore ? RoleAction.resume : entry.action
                #expect(transition.action == expectedAction, "\(from) on \(input)")
                if !entry.ignored {
                    #expect(transition.reason == event.reason, "\(from) on \(input)")
                    #expect((transition.reason == nil) == (transition.to == .poweredOn))
                }
            }
        }
    }

    @Test func everyInputIsCovered() {
        #expect(Set(Self.inputsFor.keys) == Set(ManagerEvent.allCases))
        for state in AdapterPowerState.allCases {
            #expect(Self.inputsFor.values.contains { $0.contains(.powerStateChanged(state)) })
        }
    }

    @Test func peripheralNeedsAdvertisingCentralDoesNot() {
        let noAdvertising = AdapterCapabilities(supportsLowEnergy: true, supportsAdvertising: false, powered: true)
        var peripheral = ManagerStateMachine(role: .peripheral)
        var central = ManagerStateMachine(role: .central)
        #expect(peripheral.handle(.adapterAdded(noAdvertising)).to == .unsupported)
        #expect(peripheral.reason == .adapterLacksAdvertising)
        #expect(central.handle(.adapterAdded(noAdvertising)) ==
            ManagerTransition(from: .unknown, to: .poweredOn, action: .start, event: .adapterReadyPoweredOn, reason: nil))
        let noLE = AdapterCapabilities(supportsLowEnergy: false, supportsAdvertising: false, powered: true)
        var central2 = ManagerStateMachine(role: .central)
        #expect(central2.handle(.adapterAdded(noLE)).reason == .adapterLacksLowEnergy)
    }

    @Test func startTearDownResumeAcrossADaemonRestart() {
        var machine = ManagerStateMachine(role: .peripheral)
        #expect(machine.state == .unknown)
        #expect(machine.handle(.bluetoothdAppeared).action == .none)
        #expect(machine.handle(.adapterAdded(Self.usableOn)).action == .start)
        let vanished = machine.handle(.bluetoothdVanished)
        #expect(vanished.to == .resetting && vanished.action == .tearDown && vanished.reason == .bluetoothdNotRunning)
        #expect(machine.handle(.bluetoothdAppeared).to == .unknown)
        #expect(machine.handle(.poweredChanged(true)).action == .none)  // no adapter known yet: stale
        #expect(machine.state == .unknown)
        #expect(machine.handle(.adapterAdded(Self.usableOn)).action == .resume)
    }

    @Test func powerCycleThroughPowerState() {
        var machine = ManagerStateMachine(role: .central)
        machine.handle(.adapterAdded(Self.usableOn))
        #expect(machine.handle(.powerStateChanged(.onDisabling)).action == .tearDown)
        #expect(machine.state == .resetting && machine.reason == .powerChanging)
        #expect(machine.handle(.powerStateChanged(.off)).to == .poweredOff)
        #expect(machine.handle(.poweredChanged(false)).action == .none)  // both properties change
        #expect(machine.handle(.powerStateChanged(.offEnabling)).to == .resetting)
        #expect(machine.handle(.powerStateChanged(.on)).action == .resume)
        #expect(machine.handle(.poweredChanged(true)).action == .none)
    }

    @Test func rfkillIsPoweredOffWithItsOwnReason() {
        var machine = ManagerStateMachine(role: .central)
        machine.handle(.adapterAdded(Self.usableOn))
        let blocked = machine.handle(.powerStateChanged(.offBlocked))
        #expect(blocked.to == .poweredOff && blocked.action == .tearDown && blocked.reason == .radioBlocked)
        #expect(blocked.reason?.description.contains("rfkill") == true)
    }

    @Test func ignoredEventsKeepTheReason() {
        var machine = ManagerStateMachine(role: .peripheral)
        machine.handle(.accessDenied)
        let ignored = machine.handle(.poweredChanged(true))
        #expect(ignored.to == .unauthorized && ignored.reason == .accessDenied && ignored.action == .none)
    }

    @Test func powerStateParsesBlueZStrings() {
        #expect(AdapterPowerState(rawValue: "off-blocked") == .offBlocked)
        #expect(AdapterPowerState(rawValue: "on-disabling") == .onDisabling)
        #expect(AdapterPowerState(rawValue: "sideways") == nil)
        for state in AdapterPowerState.allCases {
            #expect(AdapterPowerState(rawValue: state.rawValue) == state)
        }
    }

    @Test func reasonsHaveOneLineDescriptions() {
        let descriptions = ManagerStateReason.allCases.map(\.description)
        #expect(Set(descriptions).count == descriptions.count)
        #expect(descriptions.allSatisfy { !$0.isEmpty && !$0.contains("\n") })
    }
}
