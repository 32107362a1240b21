import BlueZ
import Machines
import Transfer

/// Feeds what the BlueZ layer observes about bluetoothd and the chosen adapter into the Transfer core's
/// ``ManagerStateMachine`` and reports the resulting CoreBluetooth-style transitions. Both roles use it: work starts
/// on ``RoleAction/start``/``RoleAction/resume`` and stops on ``RoleAction/tearDown``.
package struct ManagerStateDriver: Sendable {
    package let session: BluetoothSession
    /// "hci1", or nil for BlueZ's first adapter (re-chosen when it goes away).
    package let adapterName: String?
    package let requirement: RoleRequirement

    /// How long a first report of "no adapter" is held back in case the adapter is announced next: bluetoothd takes
    /// its bus name before it has read the kernel's controller list, so a role started together with it (boot,
    /// `systemctl restart bluetooth`) would otherwise give up on an adapter that appears a moment later.
    package let adapterGrace: Duration = .seconds(3)

    private enum DriverInput: Sendable {
        case adapterEvent(AdapterEvent)
        case graceEnded
        case ended
    }

    /// First element: the current state (a transition from `.unknown`). Then every change of state, and every
    /// transition that asks the role to act. Finishes when the session closes or the consumer stops.
    package func transitions() -> AsyncStream<ManagerTransition> {
        let adapterEvents = session.adapterEvents(adapterName: adapterName)
        let (stream, continuation) = AsyncStream<ManagerTransition>.makeStream()
        // Unstructured: it feeds the stream this returns, after this returns; the stream's end cancels it (and its children below).
        let task = Task {
            let (inputs, input) = AsyncStream<DriverInput>.makeStream()
            await withDiscardingTaskGroup { group in
                // Merges adapter events into `inputs` beside the grace timer.
                group.addTask {
                    for await event in adapterEvents { input.yield(.adapterEvent(event)) }
                    input.yield(.ended)
                }
                var graceTimerStarted = false
                var translator = ManagerInputTranslator(requirement: requirement)
                var reportedFirst = false
                var heldFirst: [ManagerTransition]?
                loop: for await item in inputs {
                    switch item {
                    case .adapterEvent(let event):
                        let transitions = translator.handle(event, adapterPresent: { currentAdapter() != nil })
                        if !reportedFirst {
                            if heldFirst == nil, !graceTimerStarted, adapterGrace > .zero,
                               let first = transitions.first, first.to == .unsupported, first.reason == .noAdapter {
                                heldFirst = transitions
                                graceTimerStarted = true
                                // At most one hold ever: once a later event superseded it,
                                // the timer's end finds nothing held and is ignored.
                                group.addTask {
                                    guard (try? await Task.sleep(for: adapterGrace)) != nil else { return }
                                    input.yield(.graceEnded)
                                }
                                continue
                            }
                            if heldFirst != nil, transitions.isEmpty { continue }
                            // What followed supersedes the held report (its `from` says where the machine was).
                            heldFirst = nil
                            if !transitions.isEmpty { reportedFirst = true }
                        }
                        for transition in transitions { continuation.yield(transition) }
                    case .graceEnded:
                        guard let held = heldFirst else { continue }
                        heldFirst = nil
                        reportedFirst = true
                        for transition in held { continuation.yield(transition) }
                    case .ended: break loop
                    }
                }
                for transition in heldFirst ?? [] { continuation.yield(transition) }
                continuation.finish()
                // The forwarder and a pending grace timer have nothing left to feed.
                group.cancelAll()
            }
        }
        continuation.onTermination = { _ in task.cancel() }
        return stream
    }

    /// The adapter to use now, when bluetoothd runs and it exists (meaningful in `poweredOn`).
    package func currentAdapter() -> Adapter? {
        guard session.serviceState.isRunning else { return nil }
        let all = session.adapters()
        guard let adapterName else { return all.first }
        return all.first { $0.name == adapterName }
    }

    /// A usage failure when `--adapter` names an adapter bluetoothd lacks while it reports others, listing those; nil
    /// otherwise (also when bluetoothd is not running yet, or reports no adapter: the state says so).
    package func unknownAdapterFailure() -> RoleFailure? {
        guard let adapterName, session.serviceState.isRunning else { return nil }
        let present = session.adapters().map(\.name)
        guard !present.isEmpty, !present.contains(adapterName) else { return nil }
        return RoleFailure(.usage, BluetoothError.unknownAdapter(name: adapterName, available: present).description)
    }
}

/// The driver's pure part: BlueZ adapter events in, manager transitions out, tested without a bus.
struct ManagerInputTranslator: Sendable {
    private(set) var machine: ManagerStateMachine
    private var reportedAny = false

    init(requirement: RoleRequirement) { machine = ManagerStateMachine(role: requirement) }

    /// - Parameter adapterPresent: whether the adapter the role wants exists now; asked after
    ///   bluetoothd appeared, to tell "no adapter" from "adapter reported next".
    mutating func handle(_ event: AdapterEvent, adapterPresent: () -> Bool) -> [ManagerTransition] {
        var transitions: [ManagerTransition] = []
        for input in Self.inputs(for: event, adapterPresent: adapterPresent) {
            let transition = machine.handle(input)
            // The first report is the current state; later ones are changes or requests to act.
            if transition.changed || transition.action != .none || (!reportedAny && transition.to != .unknown) {
                reportedAny = true
                transitions.append(transition)
            }
        }
        return transitions
    }

    static func inputs(for event: AdapterEvent, adapterPresent: () -> Bool) -> [ManagerInput] {
        switch event {
        case .bluetoothdAppeared:
            // BlueZ reports the adapter right after this when it exists; else nothing would follow, so say so now.
            return adapterPresent() ? [.bluetoothdAppeared] : [.bluetoothdAppeared, .noAdapter]
        case .bluetoothdVanished: return [.bluetoothdVanished]
        case .adapterAdded(let facts), .capabilitiesChanged(let facts):
            // An adapter event states the whole truth about the adapter.
            return [.adapterAdded(capabilities(facts))]
        case .adapterRemoved: return [.adapterRemoved]
        case .poweredChanged(let powered): return [.poweredChanged(powered)]
        case .powerStateChanged(let text):
            // A PowerState this build does not know: Powered still tells on and off.
            return AdapterPowerState(rawValue: text).map { [.powerStateChanged($0)] } ?? []
        case .accessDenied: return [.accessDenied]
        }
    }

    static func capabilities(_ facts: AdapterFacts) -> AdapterCapabilities {
        AdapterCapabilities(
            supportsLowEnergy: facts.supportsLowEnergy, supportsAdvertising: facts.supportsAdvertising,
            powered: facts.powered, powerState: facts.powerState.flatMap(AdapterPowerState.init(rawValue:)))
    }
}

extension ManagerTransition {
    package var roleEvent: RoleEvent { .stateChanged(from: from, to: to, detail: reason?.description) }

    /// What a command should do when this is the first state it sees: states waiting will not change (no bluetoothd, no
    /// adapter, no LE, denied) end the command with a failure; `poweredOff`, `resetting` and `unknown` are waited out
    /// (the state is reported, so the user sees why nothing happens). Nil when the role can wait or work.
    package var startupFailure: RoleFailure? {
        switch to {
        case .poweredOn, .poweredOff, .unknown: return nil
        case .resetting:
            // At start-up, resetting means bluetoothd is absent: nothing will bring it back by
            // itself in the next seconds. A switching adapter settles by itself.
            guard reason == .bluetoothdNotRunning else { return nil }
            // The words `status` uses; the command adds status's fix as its hint line.
            return RoleFailure(.unavailable, "bluetoothd is not running")
        case .unsupported: return RoleFailure(.unavailable, (reason ?? .noAdapter).description)
        case .unauthorized: return RoleFailure(.permissionDenied, (reason ?? .accessDenied).description)
        }
    }
}
