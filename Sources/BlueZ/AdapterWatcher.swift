import DBus

/// The facts about an adapter a role needs to decide whether it can work.
public struct AdapterFacts: Sendable, Hashable {
    public var name: String
    package var path: ObjectPath
    public var powered: Bool
    public var powerState: String?
    public var supportsLowEnergy: Bool
    public var supportsAdvertising: Bool

    init(adapter: Adapter, properties: AdapterProperties) {
        name = adapter.name
        path = adapter.path
        powered = properties.powered
        powerState = properties.powerState
        supportsLowEnergy = properties.supportsLowEnergy
        supportsAdvertising = properties.supportsAdvertising
    }
}

/// What happens to bluetoothd and the watched adapter (the roles make these the Transfer core's `ManagerInput`).
public enum AdapterEvent: Sendable, Hashable {
    /// org.bluez is owned and answered (first event when it already runs).
    case bluetoothdAppeared
    /// org.bluez has no owner (first event when it is not running); implies `adapterRemoved`, not sent.
    case bluetoothdVanished
    /// The watched adapter exists (first event after `bluetoothdAppeared` when present).
    case adapterAdded(AdapterFacts)
    /// Its capabilities changed after it was added (BlueZ exports LEAdvertisingManager1 a moment after Adapter1, and
    /// `Roles` can change with the controller's state).
    case capabilitiesChanged(AdapterFacts)
    case adapterRemoved
    case poweredChanged(Bool)
    case powerStateChanged(String)  // Adapter1.PowerState
    case accessDenied  // the D-Bus policy refuses us
}

extension BluetoothSession {
    /// Events for the adapter `adapterName` ("hci0"), or the default one (lowest index, re-chosen when it goes away)
    /// when nil: the current state, then changes. Ends when the session closes or the consumer stops.
    public func adapterEvents(adapterName: String? = nil) -> AsyncStream<AdapterEvent> {
        // The tracker starts from the current state, read after the stream subscribed.
        stream(startingWith: {
            var tracker = AdapterTracker(session: self, wantedName: adapterName)
            let events = tracker.reconcile()
            return (tracker, events)
        }) { tracker, change in
            tracker.handle(change)
        }
    }
}

/// Behind `adapterEvents`: the adapter we follow and what we last reported, so only real changes become events.
struct AdapterTracker: Sendable {
    let session: BluetoothSession
    let wantedName: String?
    private var service: BluetoothServiceState?
    private var tracked: ObjectPath?
    private var lastFacts: AdapterFacts?

    init(session: BluetoothSession, wantedName: String?) {
        self.session = session
        self.wantedName = wantedName
    }

    mutating func handle(_ change: BlueZChange) -> [AdapterEvent] {
        switch change {
        case .serviceAppeared, .serviceVanished, .accessDenied:
            return reconcile()
        case .interfacesAdded(let path, let interfaces):
            if path == tracked || (tracked == nil && interfaces[BlueZInterface.adapter] != nil) {
                return reconcile()
            }
            return []
        case .interfacesRemoved, .propertiesChanged:
            return change.path == tracked ? reconcile() : []
        }
    }

    mutating func reconcile() -> [AdapterEvent] {
        var events: [AdapterEvent] = []
        let current = session.serviceState
        if current != service {
            let previous = service
            service = current
            switch current {
            case .running:
                events.append(.bluetoothdAppeared)
            case .notRunning, .busDisconnected, .accessDenied:
                if case .accessDenied = current {
                    events.append(.accessDenied)
                } else if previous != .notRunning && previous != .busDisconnected {
                    // Also on the first look (previous == nil), so a consumer learns the state.
                    events.append(.bluetoothdVanished)
                }
                tracked = nil
                lastFacts = nil
                return events
            }
        }
        guard current.isRunning else { return events }

        // Keep following the tracked adapter while it exists; otherwise pick one.
        if let path = tracked, session.properties(of: path, interface: BlueZInterface.adapter) == nil {
            tracked = nil
            lastFacts = nil
            events.append(.adapterRemoved)
        }
        if tracked == nil {
            let candidates = session.adapters()
            let chosen = wantedName.map { name in candidates.first { $0.name == name } } ?? candidates.first
            if let chosen, let properties = chosen.properties {
                let facts = AdapterFacts(adapter: chosen, properties: properties)
                tracked = chosen.path
                lastFacts = facts
                events.append(.adapterAdded(facts))
            }
            return events
        }
        guard let path = tracked, let properties = Adapter(session: session, path: path).properties,
            let previous = lastFacts
        else { return events }
        let facts = AdapterFacts(adapter: Adapter(session: session, path: path), properties: properties)
        if facts.powerState != previous.powerState, let state = facts.powerState {
            events.append(.powerStateChanged(state))
        }
        if facts.powered != previous.powered {
            events.append(.poweredChanged(facts.powered))
        }
        if facts.supportsLowEnergy != previous.supportsLowEnergy
            || facts.supportsAdvertising != previous.supportsAdvertising {
            events.append(.capabilitiesChanged(facts))
        }
        lastFacts = facts
        return events
    }
}
