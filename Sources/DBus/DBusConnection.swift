import CDBus
import Synchronization
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A private connection to a message bus, driven on the process's reactor thread. Nothing waits on the caller's
/// thread: method calls await their reply (with a timeout, and cancellation), inbound calls to exported objects are
/// answered by tasks while our own calls are outstanding, and signals arrive as async sequences. Dropping the last
/// reference closes the connection.
package final class DBusConnection: Sendable {
    let loop: EventLoop
    let router: SignalRouter
    let registry: ExportRegistry
    private let disconnection: Disconnection
    private let nextSubscriptionID = Atomic<UInt64>(1)
    package let uniqueName: String

    private init(
        loop: EventLoop, router: SignalRouter, registry: ExportRegistry, disconnection: Disconnection,
        uniqueName: String
    ) {
        self.loop = loop
        self.router = router
        self.registry = registry
        self.disconnection = disconnection
        self.uniqueName = uniqueName
    }

    deinit { loop.requestStop() }

    /// A private connection (never libdbus's shared one), exit-on-disconnect off, registered with the system bus
    /// (honouring DBUS_SYSTEM_BUS_ADDRESS).
    package static func connectToSystemBus() async throws -> DBusConnection {
        let address = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 }
        return try await connect(address: address ?? "unix:path=/var/run/dbus/system_bus_socket")
    }

    package static func connect(address: String) async throws -> DBusConnection {
        guard !address.utf8.contains(0), !address.isEmpty else {
            throw DBusError(name: "org.freedesktop.DBus.Error.BadAddress", message: "invalid D-Bus address")
        }
        let loop = try EventLoop()
        let router = SignalRouter()
        let registry = ExportRegistry(loop: loop)
        let disconnection = Disconnection()
        // Set before the thread starts (pthread_create orders these writes before its reads).
        loop.messageHandler = { message in
            switch message.type {
            case MessageType.signal:
                router.route(message)
                return false
            case MessageType.methodCall:
                registry.handleMethodCall(message, ownerOf: { router.owners[$0] })
                return true
            default:
                return false
            }
        }
        loop.disconnectHandler = {
            router.finishAll()
            registry.close()
            disconnection.markDisconnected()
        }
        do {
            let uniqueName = try await loop.start(address: address)
            return DBusConnection(
                loop: loop, router: router, registry: registry, disconnection: disconnection, uniqueName: uniqueName)
        } catch {
            registry.close()
            throw error
        }
    }

    /// Idempotent and immediate: pending calls fail with DBusError(disconnectedName), signal streams finish, and the
    /// connection leaves the reactor.
    package func close() { loop.requestStop() }

    package var isConnected: Bool { !disconnection.isDisconnected }

    /// Returns when the connection is lost or closed, or when the waiting task is cancelled.
    package func waitUntilDisconnected() async { await disconnection.wait() }

    // MARK: Method calls

    /// Throws DBusError for an error reply (name and message kept), a timeout (noReplyName, as libdbus reports it), a
    /// closed connection (disconnectedName) and arguments that cannot be sent (invalidArgsName); CancellationError when
    /// the task is cancelled (the pending call is cancelled too; a late reply is dropped).
    @discardableResult
    package func call(
        destination: String, path: ObjectPath, interface: String, method: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) async throws -> [DBusValue] {
        let message = try Message.methodCall(
            destination: destination, path: path, interface: interface, method: method, arguments: arguments)
        let reply = try await send(message, timeout: timeout)
        return try reply.arguments()
    }

    /// A method call with NO_REPLY_EXPECTED (the callee sends none), written to the bus before this returns: for a last
    /// request on the way out, the caller may close the connection and exit at once and the call still arrives. Throws
    /// only when the call cannot be built or the connection is gone.
    package func callWithoutReply(
        destination: String, path: ObjectPath, interface: String, method: String, arguments: [DBusValue] = []
    ) async throws {
        let message = try Message.methodCall(
            destination: destination, path: path, interface: interface, method: method, arguments: arguments)
        dbus_message_set_no_reply(message.pointer, 1)
        let loop = self.loop
        let sent = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
            loop.sendAndFlush(message) { continuation.resume(returning: $0) }
        }
        if !sent { throw DBusError.disconnected() }
    }

    func send(_ message: Message, timeout: Duration) async throws -> Message {
        let loop = self.loop
        let call = PendingCall(loop: loop)
        let milliseconds = DBusConnection.milliseconds(timeout)
        let reply = try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Message, any Error>) in
                call.install(continuation)
                guard !call.isFinished else { return }
                let started = loop.enqueue { loop in
                    loop.startCall(message, timeoutMilliseconds: milliseconds, call: call)
                }
                if !started { call.finish(.failure(DBusError.disconnected())) }
            }
        } onCancel: {
            if call.finish(.failure(CancellationError())) {
                loop.enqueue { loop in loop.cancelCall(call) }
            }
        }
        if reply.type == MessageType.error { throw reply.asError() }
        return reply
    }

    /// libdbus takes an int of milliseconds; INT_MAX means no timeout.
    static func milliseconds(_ duration: Duration) -> Int32 {
        let seconds = duration.components.seconds
        guard seconds >= 0 else { return 1 }
        guard seconds < Int64(Int32.max) / 1000 else { return Int32.max }
        return Int32(max(1, min(duration.millisecondsRoundedUp, Int64(Int32.max))))
    }

    /// A call to the bus itself (org.freedesktop.DBus).
    package func callBus(_ method: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
        try await call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            method: method, arguments: arguments)
    }

    // MARK: Signals

    /// Signals matching the rule, installed on the bus before this returns (no signal sent after is missed) and removed
    /// when the consumer stops iterating (iterator released, task cancelled) or calls `finish()`. Ends when the
    /// connection closes; signals are buffered without bound until consumed.
    package func signals(matching rule: MatchRule) async throws -> DBusSignalStream {
        let id = nextSubscriptionID.wrappingAdd(1, ordering: .relaxed).oldValue
        let (stream, continuation) = AsyncStream<DBusSignal>.makeStream()
        let subscription = SignalSubscription(id: id, rule: rule, continuation: continuation)
        let loop = self.loop
        let router = self.router
        continuation.onTermination = { _ in
            loop.enqueue { loop in router.remove(id: id, loop: loop) }
        }
        // Registered locally first: anything the bus delivers once AddMatch is in is routed.
        guard loop.enqueue({ loop in router.add(subscription, loop: loop) }) else {
            continuation.finish()
            throw DBusError.disconnected()
        }
        do {
            _ = try await callBus("AddMatch", [.string(rule.ruleString)])
            if rule.senderNeedsOwnerTracking, let name = rule.sender {
                // The NameOwnerChanged rule went out before AddMatch, so the owner is tracked from here on; this
                // fetches its current value.
                let owner = try? await callBus("GetNameOwner", [.string(name)]).first?.string
                loop.enqueue { _ in router.setInitialOwner(owner, of: name) }
            }
        } catch {
            continuation.finish()
            throw error
        }
        return DBusSignalStream(stream: stream, subscription: subscription)
    }

    package func emitSignal(path: ObjectPath, interface: String, member: String, arguments: [DBusValue]) throws {
        let message = try Message.signal(path: path, interface: interface, member: member, arguments: arguments)
        guard loop.send(message) else { throw DBusError.disconnected() }
    }

    package func emitPropertiesChanged(
        path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String] = []
    ) throws {
        try Names.checkInterface(interface)
        try emitSignal(
            path: path, interface: StandardInterface.properties, member: "PropertiesChanged",
            arguments: [.string(interface), .vardict(changed), .strings(invalidated)])
    }

    // MARK: Exported objects

    /// Serves the interfaces at `path` (Properties, Introspectable and Peer come automatically), replacing what was
    /// there. With an ObjectManager at an ancestor, emits InterfacesAdded (and InterfacesRemoved for those dropped).
    package func export(_ interfaces: [DBusInterface], at path: ObjectPath) throws {
        guard isConnected else { throw DBusError.disconnected() }
        try registry.export(interfaces, at: path)
    }

    /// Makes our exported objects answer method calls (org.freedesktop.DBus.Peer's aside) only from the current owner
    /// of `name`; any other caller gets AccessDenied, and `onRefusal` is told once per caller (its unique name and the
    /// `interface.member` called). The owner is known while a signal subscription with `sender: name` is active.
    package func restrictMethodCalls(toOwnerOf name: String, onRefusal: @escaping @Sendable (String, String) -> Void) {
        registry.callerPolicy.withLock { $0 = ExportRegistry.CallerPolicy(name: name, onRefusal: onRefusal) }
    }

    /// Removes the object; emits InterfacesRemoved through an ancestor ObjectManager.
    package func unexport(_ path: ObjectPath) { registry.unexport(path) }

    /// Serves ObjectManager at `root`: GetManagedObjects returns every object exported below it with its interfaces and
    /// their readable properties (standard interfaces omitted).
    package func exportObjectManager(at root: ObjectPath) throws {
        guard isConnected else { throw DBusError.disconnected() }
        registry.addObjectManager(at: root)
    }
}

private final class Disconnection: Sendable {
    private struct State {
        var isDisconnected = false
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }
    private let state = Mutex(State())

    var isDisconnected: Bool { state.withLock { $0.isDisconnected } }

    func markDisconnected() {
        let waiters = state.withLock { state in
            state.isDisconnected = true
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.isDisconnected || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}
