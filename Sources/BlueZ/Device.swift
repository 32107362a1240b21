import BluetoothModel
import DBus

/// What BlueZ says about a remote device (org.bluez.Device1), decoded from the cache.
public struct DeviceProperties: Sendable, Hashable {
    public var address: BluetoothAddress
    public var addressType: String?  // "public" or "random"
    public var name: String?
    public var alias: String?
    public var rssi: Int16?
    public var uuids: [String]  // services, as BlueZ lists them (lower-case 128-bit)
    public var serviceData: [String: [UInt8]]  // by UUID
    public var manufacturerData: [UInt16: [UInt8]]  // by company identifier
    public var connected: Bool
    public var servicesResolved: Bool
    public var paired: Bool
    package var adapter: ObjectPath?

    init?(_ properties: [String: DBusValue]?) {
        guard let properties, let address = properties["Address"]?.string.flatMap({ BluetoothAddress($0) }) else {
            return nil
        }
        self.address = address
        addressType = properties["AddressType"]?.string
        name = properties["Name"]?.string
        alias = properties["Alias"]?.string
        rssi = properties["RSSI"]?.int16
        uuids = properties["UUIDs"]?.strings ?? []
        serviceData = (properties["ServiceData"]?.vardict ?? [:]).compactMapValues(\.bytes)
        let entries = (properties["ManufacturerData"]?.dictionaryEntries ?? []).compactMap { entry in
            entry.key.uint16.flatMap { company in entry.value.bytes.map { (company, $0) } }
        }
        manufacturerData = Dictionary(entries) { _, later in later }
        connected = properties["Connected"]?.bool ?? false
        servicesResolved = properties["ServicesResolved"]?.bool ?? false
        paired = properties["Paired"]?.bool ?? false
        adapter = properties["Adapter"]?.objectPath
    }

    /// Alias, name or address: what to show a user.
    public var displayName: String { alias ?? name ?? address.description }
}

/// A remote device (`/org/bluez/hciN/dev_XX_XX_XX_XX_XX_XX`). A handle: properties come from the cache, methods call
/// bluetoothd.
public struct Device: Sendable, Hashable, CustomStringConvertible, BlueZObjectHandle {
    static let interface = BlueZInterface.device

    public let session: BluetoothSession
    package let path: ObjectPath

    /// Which device this is, without the session: to hold, compare and show.
    public var reference: DeviceReference { DeviceReference(path: path) }

    public var properties: DeviceProperties? { DeviceProperties(cachedProperties) }

    public var exists: Bool { cachedProperties != nil }

    public var description: String { properties.map { "\($0.displayName) (\($0.address))" } ?? path.rawValue }

    // MARK: Connection

    /// One `Device1.Connect` attempt; `AlreadyConnected` counts as success. Retry if `isTransientConnectFailure`.
    public func connectOnce(timeout: Duration = .seconds(30)) async throws {
        try await session.call(path: path, interface: BlueZInterface.device, method: "Connect", timeout: timeout) { error in
            if case .bluez(.alreadyConnected, _) = error { true } else { false }
        }
    }

    /// Connects, retrying transient failures (`InProgress`, `le-connection-abort-by-local`, `br-connection-*`,
    /// timeouts) with exponential back-off; throws the last error. Stop discovery first: BlueZ connects unreliably
    /// while scanning.
    public func connect(attempts: Int = 4, initialBackoff: Duration = .milliseconds(250),
                        attemptTimeout: Duration = .seconds(30)) async throws {
        var backoff = initialBackoff
        var attempt = 1
        while true {
            do {
                try await connectOnce(timeout: attemptTimeout)
                return
            } catch let error as BluetoothError where error.isTransientConnectFailure && attempt < attempts {
                session.logger.debug("connect \(path) attempt \(attempt) failed, retrying: \(error)")
                // A back-off, not a stand-in for an event: no signal says "the controller is ready to try again".
                try await Task.sleep(for: backoff)
                backoff = backoff * 2
                attempt += 1
            }
        }
    }

    /// `Device1.Disconnect`. Not being connected is not an error.
    public func disconnect() async throws {
        try await session.call(path: path, interface: BlueZInterface.device, method: "Disconnect") { error in
            switch error {
            case .bluez(.notConnected, _), .objectGone: true
            default: false
            }
        }
    }

    /// Returns once `ServicesResolved` is true in the cache, so the services and characteristics are there to look up.
    /// Throws `.deviceDisconnected` if the device is (or becomes) disconnected, `.objectGone` when removed,
    /// `.bluetoothdNotRunning` if bluetoothd leaves, `.timedOut` after `timeout`. A cached "disconnected" is confirmed
    /// with bluetoothd, as the cache may not have seen the connection yet.
    public func waitUntilServicesResolved(timeout: Duration? = .seconds(30)) async throws {
        let changes = session.changes()   // subscribe before reading the cache
        let path = self.path
        let session = self.session
        let name = description

        try await withDeadline(timeout, what: "waiting for \(name) to resolve its services") {
            var iterator = changes.makeAsyncIterator()
            while true {
                guard session.serviceState.isRunning else { throw BluetoothError.bluetoothdNotRunning }
                guard let cached = DeviceProperties(session.properties(of: path, interface: BlueZInterface.device)) else {
                    throw BluetoothError.objectGone("device \(path)")
                }
                // Resolved only counts while connected (BlueZoo leaves it set after a disconnect).
                if cached.servicesResolved && cached.connected { return }
                if !cached.connected {
                    guard let fresh = try await DeviceProperties(session.currentProperties(of: path, interface: BlueZInterface.device)) else {
                        throw BluetoothError.objectGone("device \(path)")
                    }
                    if !fresh.connected { throw BluetoothError.deviceDisconnected(name) }
                }
                guard try await Self.nextChange(about: path, in: &iterator) else {
                    throw BluetoothError.bluetoothdNotRunning   // the session closed under us
                }
            }
        }
    }

    /// Returns once the device is disconnected or gone (after `disconnect()`, or to notice that the peer left). A
    /// cached "disconnected" is confirmed with bluetoothd first.
    public func waitUntilDisconnected() async throws {
        var iterator = session.changes().makeAsyncIterator()
        while true {
            guard session.serviceState.isRunning else { return }
            let cached = DeviceProperties(session.properties(of: path, interface: BlueZInterface.device))
            if !(cached?.connected ?? false) {
                guard let fresh = try await DeviceProperties(session.currentProperties(of: path, interface: BlueZInterface.device)),
                    fresh.connected
                else { return }
            }
            guard try await Self.nextChange(about: path, in: &iterator) else { return }
        }
    }

    /// Waits for a change about `path` (or bluetoothd); false when the session closed, throws when cancelled.
    private static func nextChange(
        about path: ObjectPath, in iterator: inout AsyncStream<BlueZChange>.Iterator
    ) async throws -> Bool {
        while let change = await iterator.next() {
            if change.path == path || change.path == nil { return true }
        }
        try Task.checkCancellation()
        return false
    }

    // MARK: GATT

    /// Primary and secondary services BlueZ resolved.
    public func services() -> [RemoteGATTService] { session.handles(RemoteGATTService.self, under: path) }

    /// The first service with this UUID (any textual form).
    public func service(uuid: String) -> RemoteGATTService? {
        services().first { BluetoothUUID.matches($0.uuid, uuid) }
    }

    /// `characteristic(service:characteristic:)`, waiting up to `grace` for it when the services resolved without it:
    /// a peripheral whose GATT database changed during discovery sends Service Changed, and bluetoothd adds what is
    /// new after `ServicesResolved` said true. Throws `.notFound` when it did not appear.
    public func characteristic(service serviceUUID: String, characteristic characteristicUUID: String,
                               appearingWithin grace: Duration) async throws -> RemoteGATTCharacteristic {
        if let found = try? characteristic(service: serviceUUID, characteristic: characteristicUUID) { return found }
        do {
            try await session.waitUntil("the service appears", timeout: grace) { [self] _ in
                (try? characteristic(service: serviceUUID, characteristic: characteristicUUID)) != nil
            }
        } catch BluetoothError.timedOut {
            // Not there: the error says what is missing.
        }
        return try characteristic(service: serviceUUID, characteristic: characteristicUUID)
    }

    /// The characteristic `characteristicUUID` in the service `serviceUUID`; throws `.notFound` naming what is missing.
    public func characteristic(service serviceUUID: String, characteristic characteristicUUID: String) throws -> RemoteGATTCharacteristic {
        guard let service = service(uuid: serviceUUID) else {
            throw BluetoothError.notFound("service \(serviceUUID) on \(description)")
        }
        guard let characteristic = service.characteristic(uuid: characteristicUUID) else {
            throw BluetoothError.notFound("characteristic \(characteristicUUID) in service \(serviceUUID) on \(description)")
        }
        return characteristic
    }
}

/// Runs `body`, failing with `BluetoothError.timedOut(what)` when `timeout` passes first.
func withDeadline<T: Sendable>(_ timeout: Duration?, what: String,
                               _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    guard let timeout else { return try await body() }
    return try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: timeout)
            throw BluetoothError.timedOut(what)
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw CancellationError() }
        return first
    }
}

// Outside the struct's body, so that the memberwise `init(session:path:)` stays.
extension Device {
    /// A handle on the device `reference` names (whether BlueZ still has it or not).
    public init(session: BluetoothSession, reference: DeviceReference) {
        self.init(session: session, path: reference.path)
    }
}
