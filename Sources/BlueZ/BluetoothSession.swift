import BluetoothModel
import DBus
import Logging
import Synchronization

/// A private connection to the system bus plus a live cache of org.bluez's object tree, filled from
/// `GetManagedObjects` and kept current from `InterfacesAdded`, `InterfacesRemoved` and `PropertiesChanged`. The owner
/// of org.bluez is watched: when bluetoothd restarts the cache is dropped and reloaded. Typed views (`Adapter`,
/// `Device`, ...) read properties from the cache without a round trip, and waits are built on `changes()`, not polling.
public final class BluetoothSession: Sendable {
    package let connection: DBusConnection
    private let ownsConnection: Bool
    private let cache: Mutex<CacheState>
    /// Forwards bus signals to the pump and runs it while the session lives; cancelled by `close()` and deinit.
    private let watch = Mutex<Task<Void, Never>?>(nil)
    let logger: Logger
    private let exportCounter = Mutex(0)
    /// Feeds the pump that applies signals and reloads in order.
    private let pumpInput: AsyncStream<PumpInput>.Continuation
    private let pumpInputs: AsyncStream<PumpInput>

    private struct CacheState {
        var service: BluetoothServiceState = .notRunning
        var objects: [ObjectPath: [String: [String: DBusValue]]] = [:]
        var subscribers: [Int: ChangeSubscriber] = [:]
        var nextSubscriberID = 0
        var closed = false
    }

    /// Opens a private connection to the system bus (honouring DBUS_SYSTEM_BUS_ADDRESS) and loads BlueZ's tree.
    /// Throws `BluetoothError.systemBusUnavailable` when there is no bus; an absent bluetoothd or a refusing policy
    /// is not an error here but a `serviceState`.
    public static func open(logger: Logger? = nil) async throws -> BluetoothSession {
        try await open(logger: logger) { try await DBusConnection.connectToSystemBus() }
    }

    /// Same, on the bus at `address` (a private dbus-daemon in tests).
    public static func open(address: String, logger: Logger? = nil) async throws -> BluetoothSession {
        try await open(logger: logger) { try await DBusConnection.connect(address: address) }
    }

    private static func open(
        logger: Logger?, _ connect: () async throws -> DBusConnection
    ) async throws -> BluetoothSession {
        let connection: DBusConnection
        do {
            connection = try await connect()
        } catch {
            throw BluetoothError.systemBusUnavailable(Self.describe(error))
        }
        return try await BluetoothSession(connection: connection, ownsConnection: true, logger: logger)
    }

    /// Wraps an existing connection. With `ownsConnection`, `close()` closes it too.
    package init(connection: DBusConnection, ownsConnection: Bool = false, logger: Logger? = nil) async throws {
        self.connection = connection
        self.ownsConnection = ownsConnection
        self.logger = logger ?? Logger(label: "bletransfer.bluez")
        self.cache = Mutex(CacheState())
        (self.pumpInputs, self.pumpInput) = AsyncStream<PumpInput>.makeStream()
        let inputContinuation = self.pumpInput

        // Subscribe before loading, so nothing after the snapshot is missed. One rule for everything org.bluez emits
        // keeps InterfacesAdded and PropertiesChanged in their original order.
        let bluezSignals: DBusSignalStream
        let ownerSignals: DBusSignalStream
        do {
            bluezSignals = try await connection.signals(matching: MatchRule(sender: BlueZInterface.service))
            ownerSignals = try await connection.signals(matching: .nameOwnerChanged(name: BlueZInterface.service))
        } catch {
            if ownsConnection { connection.close() }
            throw BluetoothError.from(error)
        }

        // Our GATT application and advertisement are bluetoothd's to call: anyone else (a forged Release would
        // desynchronise advertising) is refused.
        let refusalLogger = self.logger
        connection.restrictMethodCalls(toOwnerOf: BlueZInterface.service) { sender, call in
            refusalLogger.warning("refused a D-Bus call to our objects from \(sender) (\(call)): only org.bluez's owner may call them")
        }

        // The forwarders run as signals arrive while the initial state loads; the pump waits for the load, so the
        // signals it applies come after the snapshot.
        let (initialLoad, initialLoadDone) = AsyncStream<Void>.makeStream()
        let inputs = pumpInputs
        // Unstructured: it lives as long as the session, not a call. The forwarders, the bus watch and the retry
        // pauses are its children, the pump its body.
        let watchTask = Task { [weak self, connection] in
            await withDiscardingTaskGroup { group in
                group.addTask {
                    for await signal in bluezSignals {
                        inputContinuation.yield(.bluez(signal))
                    }
                }
                group.addTask {
                    for await signal in ownerSignals {
                        guard signal.arguments.count == 3,
                            let name = signal.arguments[0].string, name == BlueZInterface.service,
                            let newOwner = signal.arguments[2].string
                        else { continue }
                        inputContinuation.yield(.owner(newOwner))
                    }
                }
                group.addTask {
                    await connection.waitUntilDisconnected()
                    inputContinuation.yield(.busLost)
                }
                for await _ in initialLoad { break }
                for await input in inputs {
                    guard let self else { break }
                    if case .retryAfterPause(let owner, let attempt) = input {
                        // The pump must not wait itself: the pause is a child beside it. (No signal says "the
                        // ObjectManager is now attached" when no object was added yet.)
                        group.addTask {
                            guard (try? await Task.sleep(for: .milliseconds(100 * attempt))) != nil else { return }
                            inputContinuation.yield(.retryLoad(owner: owner, attempt: attempt))
                        }
                    } else {
                        await self.handle(input)
                    }
                }
                // The session closed or went away: the forwarders and pauses have nothing to feed.
                group.cancelAll()
            }
        }
        watch.withLock { $0 = watchTask }

        await loadInitialState()
        initialLoadDone.finish()
    }

    deinit {
        watch.withLock { $0 }?.cancel()
    }

    /// Stops watching, ends every `changes()` stream, and closes the connection if we opened it.
    public func close() {
        closeSubscriptions()
        pumpInput.finish()
        watch.withLock { $0 }?.cancel()
        if ownsConnection { connection.close() }
    }

    private func closeSubscriptions() {
        let subscribers = cache.withLock { state -> [ChangeSubscriber] in
            state.closed = true
            let list = Array(state.subscribers.values)
            state.subscribers.removeAll()
            return list
        }
        for subscriber in subscribers { subscriber.finish() }
    }

    // MARK: State and cache reads

    public var serviceState: BluetoothServiceState { cache.withLock { $0.service } }

    /// Throws the matching error unless bluetoothd is running and talking to us.
    public func requireService() throws {
        switch serviceState {
        case .running: return
        case .notRunning: throw BluetoothError.bluetoothdNotRunning
        case .accessDenied(let message): throw BluetoothError.accessDenied(message)
        case .busDisconnected: throw BluetoothError.systemBusUnavailable("the connection to the system bus was lost")
        }
    }

    /// The interfaces of the object at `path` and their properties (variants unwrapped, standard interfaces left out).
    package func interfaces(at path: ObjectPath) -> [String: [String: DBusValue]]? {
        cache.withLock { $0.objects[path] }
    }

    package func properties(of path: ObjectPath, interface: String) -> [String: DBusValue]? {
        cache.withLock { $0.objects[path]?[interface] }
    }

    package func paths(implementing interface: String, under ancestor: ObjectPath? = nil) -> [ObjectPath] {
        cache.withLock { state in
            state.objects.compactMap { path, interfaces in
                guard interfaces[interface] != nil else { return nil }
                if let ancestor, !path.isDescendant(of: ancestor) { return nil }
                return path
            }
        }.sorted()
    }

    /// Changes applied to the cache from now on, subscribed on return: "subscribe, read the cache, consume" misses
    /// nothing (a change may show in both; consumers treat changes as idempotent). Ends when the session closes or the
    /// bus connection is lost.
    package func changes() -> AsyncStream<BlueZChange> { stream { [$0] } }

    /// A stream that starts with `initial` (read from the cache after subscribing), then yields what `translate` makes
    /// of each change, until it answers nil, the session ends, or the consumer stops.
    package func stream<Element: Sendable>(
        initial: () -> [Element] = { [] },
        _ translate: @escaping @Sendable (BlueZChange) -> [Element]?
    ) -> AsyncStream<Element> {
        stream(startingWith: { ((), initial()) }) { _, change in translate(change) }
    }

    /// Same, with state: `start` (called after subscribing) gives the translator's first state and elements;
    /// `translate` updates that state with each change. It runs as the pump publishes each change, not in a task of
    /// its own, so a change is translated against the cache as it is right after that change.
    package func stream<Element: Sendable, State: Sendable>(
        startingWith start: () -> (State, [Element]),
        _ translate: @escaping @Sendable (inout State, BlueZChange) -> [Element]?
    ) -> AsyncStream<Element> {
        let (stream, continuation) = AsyncStream<Element>.makeStream()
        let translation = ChangeTranslation<State, Element>(continuation: continuation, translate: translate)
        let subscriber = ChangeSubscriber(deliver: translation.deliver, finish: translation.sourceEnded)
        if let id = subscribe(subscriber) {
            // Before `begin`, which may already finish the stream.
            continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        } else {
            translation.sourceEnded()
        }
        let (state, initial) = start()
        translation.begin(state, initial: initial)
        return stream
    }

    /// Adds `subscriber` to those the pump publishes to; nil once the session has ended.
    private func subscribe(_ subscriber: ChangeSubscriber) -> Int? {
        cache.withLock { state in
            guard !state.closed else { return nil }
            let id = state.nextSubscriberID
            state.nextSubscriberID += 1
            state.subscribers[id] = subscriber
            return id
        }
    }

    private func unsubscribe(_ id: Int) { _ = cache.withLock { $0.subscribers.removeValue(forKey: id) } }

    /// Returns once `condition` holds against the cache, checked now and after every change. Throws `.timedOut(what)`
    /// after `timeout`, and `.systemBusUnavailable` if the session ends first.
    public func waitUntil(_ what: String, timeout: Duration? = .seconds(30),
                          _ condition: @escaping @Sendable (BluetoothSession) -> Bool) async throws {
        let changes = self.changes()
        if condition(self) { return }
        try await withDeadline(timeout, what: what) {
            for await _ in changes {
                if condition(self) { return }
            }
            try Task.checkCancellation()
            throw BluetoothError.systemBusUnavailable("the session ended while waiting until \(what)")
        }
    }

    // MARK: Typed views

    /// Adapters, in index order (hci0, hci1, ..., hci10).
    public func adapters() -> [Adapter] { handles(Adapter.self).sorted { $0.index < $1.index } }

    /// The adapter named `name` ("hci1", or its address), or the lowest-indexed one when nil. Throws when bluetoothd
    /// is unusable, there is no adapter, or the name matches none (listing those present).
    public func adapter(named name: String?) throws -> Adapter {
        try requireService()
        let all = adapters()
        guard let name else {
            guard let first = all.first else { throw BluetoothError.noAdapter }
            return first
        }
        let wantedAddress = BluetoothAddress(name)
        if let match = all.first(where: { adapter in
            adapter.name == name || (wantedAddress != nil && adapter.properties?.address == wantedAddress)
        }) {
            return match
        }
        throw BluetoothError.unknownAdapter(name: name, available: all.map(\.name))
    }

    package func device(at path: ObjectPath) -> Device? {
        guard properties(of: path, interface: BlueZInterface.device) != nil else { return nil }
        return Device(session: self, path: path)
    }

    public func device(_ reference: DeviceReference) -> Device? { device(at: reference.path) }

    /// The devices connected through `adapter`, as the cache has them.
    public func connectedDevices(on adapter: Adapter) -> [DeviceReference] {
        paths(implementing: BlueZInterface.device, under: adapter.path).filter {
            device(at: $0)?.properties?.connected == true
        }.map(DeviceReference.init(path:))
    }

    /// Devices under `adapter` that disconnected (`Connected` became false) or that BlueZ removed, from now on, in
    /// BlueZ's order. Ends when the session closes.
    public func deviceDepartures(on adapter: Adapter) -> some AsyncSequence<DeviceReference, Never> & Sendable {
        let adapterPath = adapter.path
        return changes().compactMap { @Sendable change -> DeviceReference? in
            let gone: ObjectPath?
            switch change {
            case .propertiesChanged(let path, let interface, let changed, _)
                where interface == BlueZInterface.device && changed["Connected"]?.bool == false:
                gone = path
            case .interfacesRemoved(let path, let interfaces) where interfaces.contains(BlueZInterface.device):
                gone = path
            default:
                gone = nil
            }
            guard let path = gone, path.isDescendant(of: adapterPath) else { return nil }
            return DeviceReference(path: path)
        }
    }

    // MARK: Calls

    /// A call to bluetoothd whose reply is not awaited, written to the bus before this returns.
    package func callWithoutReply(path: ObjectPath, interface: String, method: String, arguments: [DBusValue] = []) async throws {
        do {
            try await connection.callWithoutReply(destination: BlueZInterface.service, path: path, interface: interface,
                                                  method: method, arguments: arguments)
        } catch {
            throw BluetoothError.from(error)
        }
    }

    /// A method call to org.bluez with errors mapped to `BluetoothError`.
    package func call(path: ObjectPath, interface: String, method: String, arguments: [DBusValue] = [],
                     timeout: Duration = .seconds(25)) async throws -> [DBusValue] {
        do {
            return try await connection.call(destination: BlueZInterface.service, path: path, interface: interface,
                                             method: method, arguments: arguments, timeout: timeout)
        } catch {
            throw BluetoothError.from(error)
        }
    }

    /// A call whose wanted effect may already hold: BlueZ's errors that say so (`alreadyDone`, e.g. "not connected"
    /// for Disconnect) count as success.
    package func call(path: ObjectPath, interface: String, method: String, timeout: Duration = .seconds(25),
                      succeedingOn alreadyDone: (BluetoothError) -> Bool) async throws {
        do {
            _ = try await call(path: path, interface: interface, method: method, timeout: timeout)
        } catch let error as BluetoothError where alreadyDone(error) {
            return
        }
    }

    package func setProperty(path: ObjectPath, interface: String, name: String, value: DBusValue) async throws {
        _ = try await call(path: path, interface: BlueZInterface.properties, method: "Set",
                           arguments: [.string(interface), .string(name), .variant(value)])
    }

    /// Properties.GetAll straight from bluetoothd. The cache lags signals a moment (a method reply can overtake the
    /// signals emitted just before it), so decisions that must not act on stale data ("is it really disconnected?")
    /// ask here. nil when the object or interface is gone.
    package func currentProperties(of path: ObjectPath, interface: String) async throws -> [String: DBusValue]? {
        do {
            let reply = try await call(path: path, interface: BlueZInterface.properties, method: "GetAll",
                                       arguments: [.string(interface)])
            return reply.first?.vardict ?? [:]
        } catch let error as BluetoothError {
            switch error {
            case .objectGone, .bluez(.dbusInvalidArguments, _), .bluez(.dbusUnknownInterface, _),
                 .bluez(.dbusUnknownObject, _), .bluez(.doesNotExist, _):
                return nil
            default:
                throw error
            }
        }
    }

    /// A fresh object path below /org/bletransfer for something this session exports.
    func makeExportPath(_ kind: String) -> ObjectPath {
        let number = exportCounter.withLock { counter -> Int in
            counter += 1
            return counter
        }
        return ObjectPath("/org/bletransfer").appending("\(kind)\(number)")
    }

    // MARK: Cache maintenance

    private enum PumpInput: Sendable {
        case bluez(DBusSignal)
        case owner(String)   // new owner, "" when the name was released
        /// Ask for the tree again after a pause (in a child beside the pump).
        case retryAfterPause(owner: String, attempt: Int)
        case retryLoad(owner: String, attempt: Int)
        case busLost
    }

    private func loadInitialState() async {
        do {
            let reply = try await connection.callBus("GetNameOwner", [.string(BlueZInterface.service)])
            guard let owner = reply.first?.string else { return }
            await reload(owner: owner, announce: false, attempt: 1)
        } catch {
            // NameHasNoOwner: bluetoothd is not running; the owner watch tells when it appears. Anything else (e.g.
            // the bus refused) leaves the state at notRunning too.
            if let dbus = error as? DBusError, !dbus.isServiceUnknown {
                logger.debug("GetNameOwner(org.bluez) failed: \(dbus)")
            }
        }
    }

    private func handle(_ input: PumpInput) async {
        switch input {
        case .bluez(let signal):
            apply(signal)
        case .owner(let newOwner):
            if newOwner.isEmpty {
                vanish(to: .notRunning)
            } else {
                await reload(owner: newOwner, announce: true, attempt: 1)
            }
        case .retryLoad(let owner, let attempt):
            // Only if that owner is still the one we talk to.
            guard serviceState == .running(owner: owner) else { return }
            await reload(owner: owner, announce: true, attempt: attempt)
        case .busLost:
            vanish(to: .busDisconnected)
            closeSubscriptions()
        case .retryAfterPause:
            // The pump schedules these itself, beside it.
            return
        }
    }

    private func reload(owner: String, announce: Bool, attempt: Int) async {
        do {
            let reply = try await connection.call(
                destination: BlueZInterface.service, path: .root, interface: BlueZInterface.objectManager,
                method: "GetManagedObjects")
            let managed = reply.first?.managedObjects ?? [:]
            var objects: [ObjectPath: [String: [String: DBusValue]]] = [:]
            for (path, interfaces) in managed {
                let relevant = interfaces.filter { !BlueZInterface.standardInterfaces.contains($0.key) }
                if !relevant.isEmpty { objects[path] = relevant }
            }
            publish(.serviceAppeared) { state in
                state.service = .running(owner: owner)
                state.objects = objects
                return announce
            }
        } catch let error as DBusError where error.isAccessDenied {
            publish(.accessDenied(error.message)) { state in
                state.service = .accessDenied(error.message)
                state.objects = [:]
                return true
            }
        } catch let error as DBusError where error.isServiceUnknown || error.isDisconnected {
            vanish(to: .notRunning)
        } catch {
            // The name is owned but the object manager not there yet: bluetoothd (and BlueZoo) request org.bluez a
            // moment before attaching it. Take the service as running with an empty tree (InterfacesAdded fills it)
            // and ask again shortly, a few times.
            logger.debug("GetManagedObjects on org.bluez failed (attempt \(attempt)): \(error)")
            publish(.serviceAppeared) { state in
                let changed = state.service != .running(owner: owner)
                state.service = .running(owner: owner)
                return changed && announce
            }
            if attempt < 6 {
                pumpInput.yield(.retryAfterPause(owner: owner, attempt: attempt + 1))
            }
        }
    }

    private func vanish(to newState: BluetoothServiceState) {
        publish(.serviceVanished) { state in
            let wasUp = state.service.isRunning || !state.objects.isEmpty
            state.service = newState
            state.objects = [:]
            return wasUp
        }
    }

    private func apply(_ signal: DBusSignal) {
        switch (signal.interface, signal.member) {
        case (BlueZInterface.objectManager, "InterfacesAdded"):
            guard signal.arguments.count >= 2, let path = signal.arguments[0].objectPath,
                let interfaces = signal.arguments[1].interfacesAndProperties
            else { return }
            let relevant = interfaces.filter { !BlueZInterface.standardInterfaces.contains($0.key) }
            guard !relevant.isEmpty else { return }
            publish(.interfacesAdded(path, relevant)) { state in
                guard state.service == .running(owner: signal.sender) else { return false }
                state.objects[path, default: [:]].merge(relevant) { _, new in new }
                return true
            }
        case (BlueZInterface.objectManager, "InterfacesRemoved"):
            guard signal.arguments.count >= 2, let path = signal.arguments[0].objectPath,
                let names = signal.arguments[1].strings
            else { return }
            publish(.interfacesRemoved(path, names)) { state in
                guard state.service == .running(owner: signal.sender), var object = state.objects[path] else {
                    return false
                }
                for name in names { object.removeValue(forKey: name) }
                state.objects[path] = object.isEmpty ? nil : object
                return true
            }
        case (BlueZInterface.properties, "PropertiesChanged"):
            guard signal.arguments.count >= 2, let interface = signal.arguments[0].string,
                let changed = signal.arguments[1].vardict
            else { return }
            let invalidated = signal.arguments.count >= 3 ? (signal.arguments[2].strings ?? []) : []
            let path = signal.path
            publish(.propertiesChanged(path, interface: interface, changed: changed, invalidated: invalidated)) { state in
                guard state.service == .running(owner: signal.sender),
                    state.objects[path]?[interface] != nil
                else { return false }
                state.objects[path]?[interface]?.merge(changed) { _, new in new }
                for name in invalidated { state.objects[path]?[interface]?.removeValue(forKey: name) }
                return true
            }
        default:
            return
        }
    }

    /// Applies `update` to the cache and, when it changed something, tells every subscriber, after the lock is
    /// released: a yield may resume a task, taking that task's status lock, while a cancelled subscriber's
    /// `onTermination` runs under its task's status lock and takes `cache` — yielding under `cache` deadlocked the two
    /// (seen as `send --timeout 1` hanging at its deadline). Only the pump publishes, so changes keep their order.
    private func publish(_ change: BlueZChange, _ update: (inout CacheState) -> Bool) {
        let subscribers: [ChangeSubscriber] = cache.withLock { state in
            guard update(&state) else { return [] }
            return Array(state.subscribers.values)
        }
        for subscriber in subscribers {
            subscriber.deliver(change)
        }
    }

    static func describe(_ error: any Error) -> String {
        if let dbus = error as? DBusError {
            return dbus.message.isEmpty ? dbus.name : dbus.message
        }
        return "\(error)"
    }
}

/// Where the pump publishes changes (a translation of `stream(startingWith:)`), outside the cache's lock (see `publish`).
private struct ChangeSubscriber: Sendable {
    let deliver: @Sendable (BlueZChange) -> Void
    let finish: @Sendable () -> Void
}

/// One `stream(startingWith:)`: holds the changes that arrive before its first elements are out, then translates each
/// as delivered, in order. Elements are yielded under `progress`'s lock, so a late `begin` and the pump cannot
/// interleave them; safe because nothing takes this lock while holding the cache's (the pump delivers outside it, and
/// the stream's `onTermination` takes only the cache's).
final class ChangeTranslation<State: Sendable, Element: Sendable>: Sendable {
    private struct Progress {
        var translator: State?  // nil until `begin`
        var pending: [BlueZChange] = []
        var sourceEnded = false
        var finished = false
    }

    private let continuation: AsyncStream<Element>.Continuation
    private let translate: @Sendable (inout State, BlueZChange) -> [Element]?
    private let progress = Mutex(Progress())

    init(continuation: AsyncStream<Element>.Continuation,
         translate: @escaping @Sendable (inout State, BlueZChange) -> [Element]?) {
        self.continuation = continuation
        self.translate = translate
    }

    func begin(_ initialState: State, initial: [Element]) {
        progress.withLock { progress in
            for element in initial { continuation.yield(element) }
            var translator = initialState
            let pending = progress.pending
            progress.pending = []
            for change in pending where !progress.finished {
                apply(change, to: &translator, &progress)
            }
            progress.translator = translator
            if progress.sourceEnded { finish(&progress) }
        }
    }

    @Sendable func deliver(_ change: BlueZChange) {
        progress.withLock { progress in
            guard !progress.finished else { return }
            guard var translator = progress.translator else {
                progress.pending.append(change)
                return
            }
            apply(change, to: &translator, &progress)
            progress.translator = translator
        }
    }

    @Sendable func sourceEnded() {
        progress.withLock { progress in
            progress.sourceEnded = true
            // Before `begin`, the first elements still go out first.
            if progress.translator != nil { finish(&progress) }
        }
    }

    private func apply(_ change: BlueZChange, to translator: inout State, _ progress: inout Progress) {
        guard let elements = translate(&translator, change) else {
            finish(&progress)
            return
        }
        for element in elements { continuation.yield(element) }
    }

    private func finish(_ progress: inout Progress) {
        guard !progress.finished else { return }
        progress.finished = true
        continuation.finish()
    }
}
