import BluetoothModel
import DBus
import Synchronization

/// The `options` dictionary BlueZ passes to a local characteristic's methods (gatt-api.txt).
public struct GATTRequestOptions: Sendable, Hashable {
    /// The remote device (under our adapter).
    public var device: DeviceReference?
    public var mtu: Int?  // the negotiated ATT MTU
    public var link: String?  // "LE" or "BR/EDR"
    public var offset: Int
    /// "command" (write without response), "request" (write with response), "reliable".
    public var writeType: String?

    init(_ options: [String: DBusValue]) {
        device = options["device"]?.objectPath.map { DeviceReference(path: $0) }
        mtu = options["mtu"]?.uint16.map(Int.init)
        link = options["link"]?.string
        offset = options["offset"]?.uint16.map(Int.init) ?? 0
        writeType = options["type"]?.string
    }
}

/// A subscriber that took the socket path (BlueZ called `AcquireNotify`): one value of at most
/// `socket.maximumValueLength` bytes per `socket.send`. BlueZ closes its end when the central unsubscribes or the link
/// drops (`send` then throws `.closedByPeer`).
public struct NotifySubscription: Sendable {
    public let socket: NotificationSocket
    public let options: GATTRequestOptions
    public var mtu: Int { socket.mtu }
}

/// The answer BlueZ waits for on one call to our characteristic (a read's value, a write's acknowledgement); the first
/// goes out, later ones are ignored. A reply dropped unanswered (its event discarded, the sequence finished or full),
/// or not answered within `LocalGATTApplication.replyLimit`, answers org.bluez.Error.Failed, so bluetoothd is never
/// left waiting on a request nobody serves.
public final class GATTReply<Value: Sendable>: Sendable {
    private let pending: DBusPendingReply
    private let encode: @Sendable (Value) -> [DBusValue]

    init(_ pending: DBusPendingReply, encode: @escaping @Sendable (Value) -> [DBusValue]) {
        self.pending = pending
        self.encode = encode
    }

    public var isAnswered: Bool { pending.isAnswered }

    public func succeed(_ value: Value) { pending.succeed(encode(value)) }

    /// Answers with org.bluez.Error.<kind>, which bluetoothd turns into an ATT error.
    public func fail(_ kind: BlueZErrorKind, _ message: String) {
        pending.fail(DBusError(name: kind.errorName, message: message))
    }

    deinit {
        pending.fail(DBusError(name: BlueZErrorKind.failed.errorName, message: "the request was not answered"))
    }
}

extension GATTReply where Value == Void {
    public func succeed() { succeed(()) }
}

/// What BlueZ asked of, or told, our application (`LocalGATTApplication.events`), in the order bluetoothd's calls
/// arrived. `characteristic` is the index in the service.
public enum LocalGATTEvent: Sendable {
    /// ReadValue on a characteristic that reads by request: answer with the value (from `options.offset` on).
    case read(characteristic: Int, options: GATTRequestOptions, reply: GATTReply<[UInt8]>)
    /// WriteValue (both write types). bluetoothd answers the central's write request only when `reply` is answered:
    /// answer once the value is held.
    case write(characteristic: Int, value: [UInt8], options: GATTRequestOptions, reply: GATTReply<Void>)
    /// StartNotify: a central subscribed and BlueZ will forward `notify(_:)` values. Already answered.
    case notifyStarted(characteristic: Int)
    /// StopNotify: the (last) subscriber left. Already answered.
    case notifyStopped(characteristic: Int)
    /// AcquireNotify: BlueZ took the socket's other end (already answered; `subscription.options.device`
    /// names the central when bluetoothd did).
    case notifyAcquired(characteristic: Int, subscription: NotifySubscription)
    /// That socket hung up (the subscriber left) or was closed by us.
    case notifyReleased(characteristic: Int)
    /// Confirm: the subscriber confirmed an indication (one per indication, in order; bluetoothd sends the next
    /// indication on that bearer only after it). Already answered.
    case confirmed(characteristic: Int)
}

/// One characteristic of ours: what it offers; what BlueZ asks of it arrives as `LocalGATTEvent`s.
public struct LocalGATTCharacteristic: Sendable {
    public var uuid: String
    /// Exported as gatt-api.txt's `Flags`. Without "read", reads fail with NotSupported; without "write" or
    /// "write-without-response", writes do.
    public var flags: [GATTCharacteristicFlag]
    /// What ReadValue returns (from the read's offset on) unless `readsByRequest`; `notify` replaces it.
    public var value: [UInt8]
    /// Each ReadValue becomes a `.read` event the consumer answers, instead of `value`.
    public var readsByRequest: Bool
    /// Offers AcquireNotify (it then exports `NotifyAcquired`, and BlueZ prefers the socket over StartNotify).
    public var offersAcquireNotify: Bool

    public init(uuid: String, flags: [GATTCharacteristicFlag], value: [UInt8] = [], readsByRequest: Bool = false,
                offersAcquireNotify: Bool = false) {
        self.uuid = uuid
        self.flags = flags
        self.value = value
        self.readsByRequest = readsByRequest
        self.offersAcquireNotify = offersAcquireNotify
    }

    var isWritable: Bool { flags.contains(.write) || flags.contains(.writeWithoutResponse) }
    var notifies: Bool { flags.contains(.notify) || flags.contains(.indicate) }
}

public struct LocalGATTService: Sendable {
    public var uuid: String
    public var isPrimary: Bool
    public var characteristics: [LocalGATTCharacteristic]

    public init(uuid: String, isPrimary: Bool = true, characteristics: [LocalGATTCharacteristic]) {
        self.uuid = uuid
        self.isPrimary = isPrimary
        self.characteristics = characteristics
    }
}

/// A GATT server application: an ObjectManager at `root`, one service and its characteristics, registered with
/// `GattManager1.RegisterApplication` on an adapter. BlueZ calls `GetManagedObjects` on us before it answers the
/// registration; the D-Bus layer serves that while our call waits. What BlueZ asks arrives on `events`, in the order
/// of bluetoothd's calls: they are taken on the D-Bus event loop as read, without a task per call.
public final class LocalGATTApplication: Sendable, CustomStringConvertible {
    public let session: BluetoothSession
    package let root: ObjectPath
    package let servicePath: ObjectPath
    package let characteristicPaths: [ObjectPath]  // in the order given
    /// What BlueZ asks and tells, for one consumer. Events beyond `eventBufferLimit` waiting are refused (a request
    /// gets an error reply), as are all once the consumer stops iterating.
    public let events: AsyncStream<LocalGATTEvent>
    private let eventSink: AsyncStream<LocalGATTEvent>.Continuation
    private let service: LocalGATTService
    private let registration: ManagerRegistration
    private let state: Mutex<[CharacteristicState]>
    private let replyDeadlines: ReplyDeadlines

    /// How many events may wait for the consumer; a central writes a few at a time (HELLO, PROGRESS, ACK), so
    /// reaching it means the consumer is stuck.
    public static let eventBufferLimit = 256

    /// How long a request may wait for its answer before it is answered with an error: below the 25 s bluetoothd waits
    /// for our reply (libdbus's default call timeout), so the central hears our error rather than bluetoothd's timeout.
    public static let replyLimit: Duration = .seconds(20)

    private struct CharacteristicState {
        var value: [UInt8]
        var notifying = false
        var notifyAcquired = false
    }

    /// An application to be exported at a fresh path of the session's.
    public convenience init(session: BluetoothSession, service: LocalGATTService) {
        self.init(session: session, service: service, root: nil)
    }

    /// `replyLimit`: how long a request waits for its answer (tests shorten it).
    package init(session: BluetoothSession, service: LocalGATTService, root: ObjectPath?,
                 replyLimit: Duration = LocalGATTApplication.replyLimit) {
        self.session = session
        self.service = service
        let root = root ?? session.makeExportPath("app")
        self.root = root
        self.servicePath = root.appending("service0")
        self.characteristicPaths = service.characteristics.indices.map { root.appending("service0").appending("char\($0)") }
        self.state = Mutex(service.characteristics.map { CharacteristicState(value: $0.value) })
        self.registration = ManagerRegistration(root, with: .gatt, in: session)
        self.replyDeadlines = ReplyDeadlines(limit: replyLimit)
        (events, eventSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(Self.eventBufferLimit))
    }

    deinit {
        eventSink.finish()
    }

    /// Its ObjectManager's path, for logs.
    public var description: String { root.rawValue }

    package var registeredAdapter: ObjectPath? { registration.adapter }

    /// Exports and registers on `adapter`, runs `body`, then unregisters and unexports however it ends, cancellation
    /// included. Throws bluetoothd's refusal as a `BluetoothError` without running `body`, `CancellationError` when
    /// cancelled before registering, or what `body` threw.
    public func withRegistration<Outcome>(
        on adapter: Adapter, isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> Outcome
    ) async throws -> Outcome {
        try await registration.withRegistration(on: adapter.path, export: { try self.exportObjects() },
                                                unexport: { self.unexportObjects() }, body)
    }

    /// Exports and registers on `adapter` (test support whose lifetime is not a scope; all else uses `withRegistration`).
    package func register(on adapter: Adapter) async throws {
        try await registration.register(on: adapter.path, export: exportObjects, unexport: unexportObjects)
    }

    /// Unregisters (if registered) and removes the exported objects; errors are swallowed.
    package func unregister() async { await registration.unregister(unexport: unexportObjects) }

    /// Notifies through the fallback path: `PropertiesChanged` on `Value`, which BlueZ turns into a notification (no
    /// back-pressure: prefer the AcquireNotify socket).
    public func notify(_ value: [UInt8], characteristic index: Int = 0) throws {
        precondition(characteristicPaths.indices.contains(index), "no characteristic #\(index)")
        state.withLock { $0[index].value = value }
        try session.connection.emitPropertiesChanged(path: characteristicPaths[index], interface: BlueZInterface.gattCharacteristic,
                                                     changed: ["Value": .bytes(value)])
    }

    /// Whether a StartNotify session is active on characteristic `index`.
    public func isNotifying(characteristic index: Int = 0) -> Bool {
        state.withLock { $0[index].notifying }
    }

    /// Whether BlueZ holds an AcquireNotify socket for characteristic `index`.
    public func isNotifyAcquired(characteristic index: Int = 0) -> Bool {
        state.withLock { $0[index].notifyAcquired }
    }

    /// Hands `event` to the consumer; a request refused (the consumer behind by `eventBufferLimit`, or gone) is answered
    /// with an error here.
    private func deliver(_ event: LocalGATTEvent) {
        let refusal: String
        switch eventSink.yield(event) {
        case .enqueued: return
        case .dropped: refusal = "\(Self.eventBufferLimit) earlier requests are still waiting"
        case .terminated: refusal = "nobody serves the characteristic's requests any more"
        @unknown default: refusal = "the request was not taken"
        }
        switch event {
        case .read(_, _, let reply): reply.fail(.failed, refusal)
        case .write(_, _, _, let reply): reply.fail(.failed, refusal)
        case .notifyAcquired(_, let subscription):
            // Nobody will write to it: hang up, so that BlueZ drops the subscription.
            subscription.socket.close()
            session.logger.debug("\(root): closed a notify socket nobody took: \(refusal)")
        default: session.logger.debug("\(root): dropped \(event): \(refusal)")
        }
    }

    // MARK: Export

    private func exportObjects() throws {
        let connection = session.connection
        try connection.exportObjectManager(at: root)
        try connection.export([serviceInterface()], at: servicePath)
        for index in service.characteristics.indices {
            try connection.export([characteristicInterface(index)], at: characteristicPaths[index])
        }
    }

    private func unexportObjects() {
        let connection = session.connection
        for path in characteristicPaths.reversed() { connection.unexport(path) }
        connection.unexport(servicePath)
        connection.unexport(root)
    }

    private func serviceInterface() -> DBusInterface {
        let uuid = BluetoothUUID.canonicalOrLowercased(service.uuid)
        let isPrimary = service.isPrimary
        return DBusInterface(name: BlueZInterface.gattService, properties: [
            DBusProperty(name: "UUID", signature: "s", get: { .string(uuid) }),
            DBusProperty(name: "Primary", signature: "b", get: { .boolean(isPrimary) }),
        ])
    }

    /// The characteristic's GattCharacteristic1; its methods are immediate (taken on the event loop, in arrival order).
    private func characteristicInterface(_ index: Int) -> DBusInterface {
        let emit = propertiesChangedEmitter(for: characteristicPaths[index])
        var methods = valueMethods(index) + notifyMethods(index, emit: emit)
        var properties = characteristicProperties(index)
        if service.characteristics[index].offersAcquireNotify {
            properties.append(DBusProperty(name: "NotifyAcquired", signature: "b", get: { [self] in
                .boolean(state.withLock { $0[index].notifyAcquired })
            }))
            methods.append(acquireNotifyMethod(index, emit: emit))
        }
        return DBusInterface(name: BlueZInterface.gattCharacteristic, methods: methods, properties: properties)
    }

    /// Emits PropertiesChanged on the characteristic at `path` (a failure is only logged).
    private func propertiesChangedEmitter(for path: ObjectPath) -> @Sendable ([String: DBusValue]) -> Void {
        let session = self.session
        return { changed in
            do {
                try session.connection.emitPropertiesChanged(path: path, interface: BlueZInterface.gattCharacteristic,
                                                             changed: changed)
            } catch {
                session.logger.debug("PropertiesChanged on \(path) failed: \(error)")
            }
        }
    }

    private static func notSupported(_ what: String) -> DBusError {
        DBusError(name: BlueZErrorKind.notSupported.errorName, message: "\(what) not supported")
    }

    /// ReadValue and WriteValue; they reach the state through the application, which they keep alive while exported.
    private func valueMethods(_ index: Int) -> [DBusMethod] {
        let definition = service.characteristics[index]
        let flags = definition.flags
        let application = self
        return [
            DBusMethod(name: "ReadValue", in: "a{sv}", out: "ay") { call, reply in
                guard flags.contains(.read) else { return reply.fail(Self.notSupported("read")) }
                let options = GATTRequestOptions(call.arguments.first?.vardict ?? [:])
                if definition.readsByRequest {
                    return application.deliver(.read(characteristic: index, options: options,
                                                     reply: GATTReply(application.replyDeadlines.track(reply)) { [.bytes($0)] }))
                }
                let value = application.state.withLock { $0[index].value }
                guard options.offset <= value.count else {
                    return reply.fail(DBusError(name: BlueZErrorKind.invalidOffset.errorName, message: "offset beyond the value"))
                }
                reply.succeed([.bytes(Array(value[options.offset...]))])
            },
            DBusMethod(name: "WriteValue", in: "aya{sv}") { call, reply in
                guard definition.isWritable else { return reply.fail(Self.notSupported("write")) }
                let value = call.arguments.first?.bytes ?? []
                let options = GATTRequestOptions(call.arguments.count > 1 ? (call.arguments[1].vardict ?? [:]) : [:])
                application.deliver(.write(characteristic: index, value: value, options: options,
                                           reply: GATTReply(application.replyDeadlines.track(reply)) { _ in [] }))
            },
        ]
    }

    private func notifyMethods(_ index: Int, emit: @escaping @Sendable ([String: DBusValue]) -> Void) -> [DBusMethod] {
        let definition = service.characteristics[index]
        let application = self
        return [
            DBusMethod(name: "StartNotify") { _, reply in
                guard definition.notifies else { return reply.fail(Self.notSupported("notify")) }
                application.setNotifying(true, index, emit: emit)
                reply.succeed()
            },
            DBusMethod(name: "StopNotify") { _, reply in
                application.setNotifying(false, index, emit: emit)
                reply.succeed()
            },
            // Indication confirmations (bluetoothd's conf_cb); notifications have none.
            DBusMethod(name: "Confirm") { _, reply in
                application.deliver(.confirmed(characteristic: index))
                reply.succeed()
            },
        ]
    }

    /// Records StartNotify (true) or StopNotify (false); only a change is announced and becomes an event.
    private func setNotifying(_ notifying: Bool, _ index: Int, emit: @Sendable ([String: DBusValue]) -> Void) {
        let was = state.withLock { state -> Bool in
            defer { state[index].notifying = notifying }
            return state[index].notifying
        }
        guard was != notifying else { return }
        emit(["Notifying": .boolean(notifying)])
        deliver(notifying ? .notifyStarted(characteristic: index) : .notifyStopped(characteristic: index))
    }

    private func characteristicProperties(_ index: Int) -> [DBusProperty] {
        let definition = service.characteristics[index]
        let uuid = BluetoothUUID.canonicalOrLowercased(definition.uuid)
        let servicePath = self.servicePath
        let flags = definition.flags
        let application = self
        return [
            DBusProperty(name: "UUID", signature: "s", get: { .string(uuid) }),
            DBusProperty(name: "Service", signature: "o", get: { .objectPath(servicePath) }),
            DBusProperty(name: "Flags", signature: "as", get: { .strings(flags.map(\.bluezName)) }),
            DBusProperty(name: "Value", signature: "ay", get: {
                .bytes(application.state.withLock { $0[index].value })
            }),
            DBusProperty(name: "Notifying", signature: "b", get: {
                .boolean(application.state.withLock { $0[index].notifying })
            }),
        ]
    }

    private func acquireNotifyMethod(_ index: Int, emit: @escaping @Sendable ([String: DBusValue]) -> Void) -> DBusMethod {
        let application = self
        return DBusMethod(name: "AcquireNotify", in: "a{sv}", out: "hq") { call, reply in
            let options = GATTRequestOptions(call.arguments.first?.vardict ?? [:])
            // gatt-api.txt: the MTU we return must not exceed the negotiated one; without one, the LE minimum.
            let mtu = max(options.mtu ?? 23, 23)
            let pair: (local: NotificationSocket, exported: Int32)
            do {
                pair = try NotificationSocket.makeExportPair(mtu: mtu)
            } catch {
                return reply.fail(DBusError(name: BlueZErrorKind.failed.errorName, message: "\(error)"))
            }
            application.state.withLock { $0[index].notifyAcquired = true }
            emit(["NotifyAcquired": .boolean(true)])
            // The answer first: the event's consumer may write to the socket at once.
            reply.succeed([.unixFD(UnixFileDescriptor(owning: pair.exported)), .uint16(UInt16(clamping: mtu))])
            application.deliver(.notifyAcquired(characteristic: index,
                                                subscription: NotifySubscription(socket: pair.local, options: options)))
            // Unstructured: one per subscription, for as long as BlueZ holds the socket; it reports the hang-up.
            Task {
                await pair.local.waitForHangUp()
                application.state.withLock { $0[index].notifyAcquired = false }
                emit(["NotifyAcquired": .boolean(false)])
                application.deliver(.notifyReleased(characteristic: index))
            }
        }
    }
}

/// Answers with an error the replies not answered within `limit` of their arrival. The limit is the same for all, so
/// deadlines come in arrival order: one task, running while any reply is pending, sleeps until the earliest.
private final class ReplyDeadlines: Sendable {
    private struct Pending {
        let deadline: ContinuousClock.Instant
        /// Weak: an answered reply is released by its holder; only one held unanswered needs the deadline.
        weak var reply: DBusPendingReply?

        var isSettled: Bool { reply?.isAnswered ?? true }
    }

    private struct State {
        var pending: [Pending] = []
        var sweeping = false
    }

    private let limit: Duration
    private let state = Mutex(State())

    init(limit: Duration) {
        self.limit = limit
    }

    func track(_ reply: DBusPendingReply) -> DBusPendingReply {
        let startSweeping = state.withLock { state -> Bool in
            state.pending.append(Pending(deadline: .now + limit, reply: reply))
            defer { state.sweeping = true }
            return !state.sweeping
        }
        if startSweeping {
            // Unstructured: one per application while replies are pending (not one per request); it ends when none is.
            Task { await self.sweep() }
        }
        return reply
    }

    private func sweep() async {
        while true {
            let (expired, next) = state.withLock { state -> ([DBusPendingReply], ContinuousClock.Instant?) in
                let now = ContinuousClock.now
                var expired: [DBusPendingReply] = []
                while let first = state.pending.first, first.isSettled || first.deadline <= now {
                    if let reply = first.reply, !first.isSettled { expired.append(reply) }
                    state.pending.removeFirst()
                }
                if state.pending.isEmpty { state.sweeping = false }
                return (expired, state.pending.first?.deadline)
            }
            for reply in expired {
                reply.fail(DBusError(name: BlueZErrorKind.failed.errorName, message: "the request was not answered in time"))
            }
            guard let next else { return }
            try? await Task.sleep(until: next)
        }
    }
}
