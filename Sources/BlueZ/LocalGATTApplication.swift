import BluetoothModel
import DBus
import Synchronization

/// The `options` dictionary BlueZ passes to a local characteristic's methods (gatt-api.txt):
/// which device asks, the link's ATT MTU, the link type, the offset and the write type.
public struct GATTRequestOptions: Sendable, Hashable {
    /// The remote device (under our adapter).
    public var device: DeviceReference?
    /// The negotiated ATT MTU.
    public var mtu: Int?
    /// "LE" or "BR/EDR".
    public var link: String?
    public var offset: Int
    /// "command" (write without response), "request" (write with response), "reliable".
    public var writeType: String?

    public init(device: DeviceReference? = nil, mtu: Int? = nil, link: String? = nil, offset: Int = 0, writeType: String? = nil) {
        self.device = device
        self.mtu = mtu
        self.link = link
        self.offset = offset
        self.writeType = writeType
    }

    init(_ options: [String: DBusValue]) {
        device = options["device"]?.objectPath.map { DeviceReference(path: $0) }
        mtu = options["mtu"]?.uint16.map(Int.init)
        link = options["link"]?.string
        offset = options["offset"]?.uint16.map(Int.init) ?? 0
        writeType = options["type"]?.string
    }
}

/// A subscriber that took the socket path (BlueZ called `AcquireNotify`): write one value per
/// `socket.send`, at most `socket.maximumValueLength` bytes. The socket's other end is
/// BlueZ's; it closes it when the central unsubscribes or the link drops (`send` then throws
/// `.closedByPeer`).
public struct NotifySubscription: Sendable {
    public let socket: NotificationSocket
    public let options: GATTRequestOptions
    public var mtu: Int { socket.mtu }
}

/// What our characteristic does when BlueZ calls it. Closures run off the D-Bus event loop;
/// `startNotify`, `stopNotify` and `write` should return promptly (start long work in a
/// task): BlueZ waits for their replies.
public struct LocalCharacteristicHandlers: Sendable {
    /// ReadValue. nil: reads fail with org.bluez.Error.NotSupported.
    public var read: (@Sendable (GATTRequestOptions) async throws -> [UInt8])?
    /// WriteValue (both write types). nil: writes fail with NotSupported.
    public var write: (@Sendable ([UInt8], GATTRequestOptions) async throws -> Void)?
    /// StartNotify: a central subscribed and BlueZ will forward `notify(_:)` values.
    public var startNotify: (@Sendable () async -> Void)?
    /// StopNotify: the (last) subscriber left.
    public var stopNotify: (@Sendable () async -> Void)?
    /// Non-nil makes the characteristic support AcquireNotify (it then exports
    /// `NotifyAcquired`, and BlueZ prefers the socket over StartNotify). Called in a new task
    /// after the socket was created; the reply to BlueZ does not wait for it.
    public var acquireNotify: (@Sendable (NotifySubscription) async -> Void)?
    /// Confirm: the subscriber confirmed an indication (one call per indication, in order;
    /// bluetoothd sends the next indication on that bearer only after it). Used by
    /// characteristics with the "indicate" flag; nil ignores confirmations.
    public var confirm: (@Sendable () async -> Void)?

    public init(read: (@Sendable (GATTRequestOptions) async throws -> [UInt8])? = nil,
                write: (@Sendable ([UInt8], GATTRequestOptions) async throws -> Void)? = nil,
                startNotify: (@Sendable () async -> Void)? = nil,
                stopNotify: (@Sendable () async -> Void)? = nil,
                acquireNotify: (@Sendable (NotifySubscription) async -> Void)? = nil,
                confirm: (@Sendable () async -> Void)? = nil) {
        self.read = read
        self.write = write
        self.startNotify = startNotify
        self.stopNotify = stopNotify
        self.acquireNotify = acquireNotify
        self.confirm = confirm
    }
}

/// Subscription changes on a local characteristic (index = position in the service).
public enum LocalGATTEvent: Sendable, Hashable {
    case notifyStarted(characteristic: Int)
    case notifyStopped(characteristic: Int)
    /// BlueZ took an AcquireNotify socket (for `device`, when it said).
    case notifyAcquired(characteristic: Int, device: DeviceReference?)
    /// That socket hung up (the subscriber left) or was closed by us.
    case notifyReleased(characteristic: Int)
}

public struct LocalGATTCharacteristic: Sendable {
    public var uuid: String
    /// What it offers (exported as gatt-api.txt's `Flags`: "read", "write", "notify", ...).
    public var flags: [GATTCharacteristicFlag]
    public var handlers: LocalCharacteristicHandlers

    public init(uuid: String, flags: [GATTCharacteristicFlag], handlers: LocalCharacteristicHandlers) {
        self.uuid = uuid
        self.flags = flags
        self.handlers = handlers
    }
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

/// A GATT server application: an ObjectManager at `root`, one service, its characteristics,
/// registered with `GattManager1.RegisterApplication` on an adapter. BlueZ calls
/// `GetManagedObjects` on us before it answers the registration; the D-Bus layer serves that
/// while our call waits.
public final class LocalGATTApplication: Sendable, CustomStringConvertible {
    public let session: BluetoothSession
    package let root: ObjectPath
    package let servicePath: ObjectPath
    /// One path per characteristic, in the order given.
    package let characteristicPaths: [ObjectPath]
    private let service: LocalGATTService
    private let registration: ManagerRegistration
    private let state: Mutex<State>

    private struct CharacteristicState {
        var value: [UInt8] = []
        var notifying = false
        var notifyAcquired = false
    }

    private struct State {
        var characteristics: [CharacteristicState]
        var subscribers: [Int: AsyncStream<LocalGATTEvent>.Continuation] = [:]
        var nextSubscriber = 0
    }

    /// An application to be exported at a fresh path of the session's.
    public convenience init(session: BluetoothSession, service: LocalGATTService) {
        self.init(session: session, service: service, root: nil)
    }

    package init(session: BluetoothSession, service: LocalGATTService, root: ObjectPath?) {
        self.session = session
        self.service = service
        let root = root ?? session.makeExportPath("app")
        self.root = root
        self.servicePath = root.appending("service0")
        self.characteristicPaths = service.characteristics.indices.map { root.appending("service0").appending("char\($0)") }
        self.state = Mutex(State(characteristics: Array(repeating: CharacteristicState(), count: service.characteristics.count)))
        self.registration = ManagerRegistration(root, with: .gatt, in: session)
    }

    /// Where it is exported (its ObjectManager's path), for logs.
    public var description: String { root.rawValue }

    /// The adapter we are registered on, if any.
    package var registeredAdapter: ObjectPath? { registration.adapter }

    /// Exports the objects and registers the application on `adapter`.
    public func register(on adapter: Adapter) async throws {
        try await registration.register(on: adapter.path, export: exportObjects, unexport: unexportObjects)
    }

    /// Unregisters (if registered) and removes the exported objects. Errors are swallowed:
    /// this runs on teardown, when bluetoothd or the adapter may already be gone (BlueZ then
    /// forgot the application anyway).
    public func unregister() async {
        await registration.unregister(unexport: unexportObjects)
    }

    /// Notifies subscribers through the fallback path: `PropertiesChanged` on `Value`, which
    /// BlueZ turns into a notification (no back-pressure: prefer the AcquireNotify socket).
    public func notify(_ value: [UInt8], characteristic index: Int = 0) throws {
        precondition(characteristicPaths.indices.contains(index), "no characteristic #\(index)")
        state.withLock { $0.characteristics[index].value = value }
        try session.connection.emitPropertiesChanged(path: characteristicPaths[index], interface: BlueZInterface.gattCharacteristic,
                                                     changed: ["Value": .bytes(value)])
    }

    /// Subscription events from now on (the stream is in place when this returns).
    public func events() -> AsyncStream<LocalGATTEvent> {
        let (stream, continuation) = AsyncStream<LocalGATTEvent>.makeStream()
        let id = state.withLock { state -> Int in
            defer { state.nextSubscriber += 1 }
            state.subscribers[state.nextSubscriber] = continuation
            return state.nextSubscriber
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    /// Whether a StartNotify session is active on characteristic `index`.
    public func isNotifying(characteristic index: Int = 0) -> Bool {
        state.withLock { $0.characteristics[index].notifying }
    }

    /// Whether BlueZ holds an AcquireNotify socket for characteristic `index`.
    public func isNotifyAcquired(characteristic index: Int = 0) -> Bool {
        state.withLock { $0.characteristics[index].notifyAcquired }
    }

    /// Sets the cached value ReadValue returns when no `read` handler is given.
    public func setValue(_ value: [UInt8], characteristic index: Int = 0) {
        state.withLock { $0.characteristics[index].value = value }
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

    private func characteristicInterface(_ index: Int) -> DBusInterface {
        let definition = service.characteristics[index]
        let uuid = BluetoothUUID.canonicalOrLowercased(definition.uuid)
        let handlers = definition.handlers
        let path = characteristicPaths[index]
        let servicePath = self.servicePath
        let flags = definition.flags
        // The exported handlers reach the state through the application, which they keep alive.
        let application = self
        let session = self.session

        @Sendable func announce(_ event: LocalGATTEvent) {
            application.state.withLock { state in
                for continuation in state.subscribers.values { continuation.yield(event) }
            }
        }

        @Sendable func emit(_ changed: [String: DBusValue]) {
            do {
                try session.connection.emitPropertiesChanged(path: path, interface: BlueZInterface.gattCharacteristic,
                                                             changed: changed)
            } catch {
                session.logger.debug("PropertiesChanged on \(path) failed: \(error)")
            }
        }

        var methods: [DBusMethod] = [
            DBusMethod(name: "ReadValue", in: "a{sv}", out: "ay") { call in
                let options = GATTRequestOptions(call.arguments.first?.vardict ?? [:])
                if let read = handlers.read {
                    return [.bytes(try await read(options))]
                }
                guard flags.contains(.read) else {
                    throw DBusError(name: BlueZErrorKind.notSupported.errorName, message: "read not supported")
                }
                let value = application.state.withLock { $0.characteristics[index].value }
                guard options.offset <= value.count else {
                    throw DBusError(name: BlueZErrorKind.invalidOffset.errorName, message: "offset beyond the value")
                }
                return [.bytes(value[options.offset...])]
            },
            DBusMethod(name: "WriteValue", in: "aya{sv}") { call in
                guard let write = handlers.write else {
                    throw DBusError(name: BlueZErrorKind.notSupported.errorName, message: "write not supported")
                }
                let value = call.arguments.first?.bytes ?? []
                let options = GATTRequestOptions(call.arguments.count > 1 ? (call.arguments[1].vardict ?? [:]) : [:])
                try await write(value, options)
                return []
            },
            DBusMethod(name: "StartNotify") { _ in
                let already = application.state.withLock { state -> Bool in
                    defer { state.characteristics[index].notifying = true }
                    return state.characteristics[index].notifying
                }
                if !already {
                    emit(["Notifying": .boolean(true)])
                    announce(.notifyStarted(characteristic: index))
                    await handlers.startNotify?()
                }
                return []
            },
            DBusMethod(name: "StopNotify") { _ in
                let was = application.state.withLock { state -> Bool in
                    defer { state.characteristics[index].notifying = false }
                    return state.characteristics[index].notifying
                }
                if was {
                    emit(["Notifying": .boolean(false)])
                    announce(.notifyStopped(characteristic: index))
                    await handlers.stopNotify?()
                }
                return []
            },
            // Indication confirmations (bluetoothd's conf_cb); notifications have none.
            DBusMethod(name: "Confirm") { _ in
                await handlers.confirm?()
                return []
            },
        ]

        var properties: [DBusProperty] = [
            DBusProperty(name: "UUID", signature: "s", get: { .string(uuid) }),
            DBusProperty(name: "Service", signature: "o", get: { .objectPath(servicePath) }),
            DBusProperty(name: "Flags", signature: "as", get: { .strings(flags.map(\.bluezName)) }),
            DBusProperty(name: "Value", signature: "ay", get: {
                .bytes(application.state.withLock { $0.characteristics[index].value })
            }),
            DBusProperty(name: "Notifying", signature: "b", get: {
                .boolean(application.state.withLock { $0.characteristics[index].notifying })
            }),
        ]

        if let acquireNotify = handlers.acquireNotify {
            properties.append(DBusProperty(name: "NotifyAcquired", signature: "b", get: {
                .boolean(application.state.withLock { $0.characteristics[index].notifyAcquired })
            }))
            methods.append(DBusMethod(name: "AcquireNotify", in: "a{sv}", out: "hq") { call in
                let options = GATTRequestOptions(call.arguments.first?.vardict ?? [:])
                // gatt-api.txt: the MTU we return must not exceed the negotiated one; without
                // one, fall back to the LE minimum.
                let mtu = max(options.mtu ?? 23, 23)
                let pair: (local: NotificationSocket, exported: Int32)
                do {
                    pair = try NotificationSocket.makeExportPair(mtu: mtu)
                } catch {
                    throw DBusError(name: BlueZErrorKind.failed.errorName, message: "\(error)")
                }
                let exported = UnixFileDescriptor(owning: pair.exported)
                application.state.withLock { $0.characteristics[index].notifyAcquired = true }
                emit(["NotifyAcquired": .boolean(true)])
                announce(.notifyAcquired(characteristic: index, device: options.device))
                let subscription = NotifySubscription(socket: pair.local, options: options)
                // Unstructured: the reply must go out before anyone can read the socket, so the transfer runs after this returns;
                // beside it, a child notices when BlueZ lets go.
                Task {
                    await withDiscardingTaskGroup { group in
                        group.addTask { await acquireNotify(subscription) }
                        group.addTask {
                            await pair.local.waitForHangUp()
                            application.state.withLock { $0.characteristics[index].notifyAcquired = false }
                            emit(["NotifyAcquired": .boolean(false)])
                            announce(.notifyReleased(characteristic: index))
                        }
                    }
                }
                return [.unixFD(exported), .uint16(UInt16(clamping: mtu))]
            })
        }

        return DBusInterface(name: BlueZInterface.gattCharacteristic, methods: methods, properties: properties)
    }
}
