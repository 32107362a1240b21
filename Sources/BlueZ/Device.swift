import BluetoothModel
import DBus

/// What BlueZ says about a remote device (org.bluez.Device1), decoded from the cache.
public struct DeviceProperties: Sendable, Hashable {
    public var address: BluetoothAddress
    /// "public" or "random".
    public var addressType: String?
    public var name: String?
    public var alias: String?
    public var rssi: Int16?
    public var txPower: Int16?
    /// Service UUIDs, as BlueZ lists them (lower-case 128-bit).
    public var uuids: [String]
    /// Service data by UUID.
    public var serviceData: [String: [UInt8]]
    /// Manufacturer data by company identifier.
    public var manufacturerData: [UInt16: [UInt8]]
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
        txPower = properties["TxPower"]?.int16
        uuids = properties["UUIDs"]?.strings ?? []
        var serviceData: [String: [UInt8]] = [:]
        for (uuid, value) in properties["ServiceData"]?.vardict ?? [:] {
            if let bytes = value.bytes { serviceData[uuid] = bytes }
        }
        self.serviceData = serviceData
        var manufacturerData: [UInt16: [UInt8]] = [:]
        for entry in properties["ManufacturerData"]?.dictionaryEntries ?? [] {
            if let company = entry.key.uint16, let bytes = entry.value.bytes {
                manufacturerData[company] = bytes
            }
        }
        self.manufacturerData = manufacturerData
        connected = properties["Connected"]?.bool ?? false
        servicesResolved = properties["ServicesResolved"]?.bool ?? false
        paired = properties["Paired"]?.bool ?? false
        adapter = properties["Adapter"]?.objectPath
    }

    /// Alias, else name, else address: what to show a user.
    public var displayName: String { alias ?? name ?? address.description }
}

/// A remote device (`/org/bluez/hciN/dev_XX_XX_XX_XX_XX_XX`). A handle: properties come from
/// the session's cache, methods call bluetoothd.
public struct Device: Sendable, Hashable, CustomStringConvertible, BlueZObjectHandle {
    static let interface = BlueZInterface.device

    public let session: BluetoothSession
    package let path: ObjectPath

    /// Which device this is, without the session: to hold, compare and show.
    public var reference: DeviceReference { DeviceReference(path: path) }

    public var properties: DeviceProperties? { DeviceProperties(cachedProperties) }

    public var exists: Bool { cachedProperties != nil }

    public var description: String {
        properties.map { "\($0.displayName) (\($0.address))" } ?? path.rawValue
    }

    // MARK: Connection

    /// One `Device1.Connect` attempt. `AlreadyConnected` counts as success. Failures are
    /// `BluetoothError`s; check `isTransientConnectFailure` to decide on a retry.
    public func connectOnce(timeout: Duration = .seconds(30)) async throws {
        try await session.call(path: path, interface: BlueZInterface.device, method: "Connect", timeout: timeout) { error in
            if case .bluez(.alreadyConnected, _) = error { true } else { false }
        }
    }

    /// Connects, retrying transient failures (`InProgress`, `le-connection-abort-by-local`,
    /// `br-connection-*`, timeouts) with exponential back-off. Stop discovery first: BlueZ
    /// connects unreliably while scanning. Throws the last error when all attempts failed.
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
                // A back-off between attempts, not a stand-in for an event: there is no
                // signal for "the controller is ready to try again".
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

    /// Fresh properties straight from bluetoothd (the cached `properties` can lag a moment
    /// behind a method reply, e.g. right after `connect()` returns). nil when the device is gone.
    public func currentProperties() async throws -> DeviceProperties? {
        DeviceProperties(try await session.currentProperties(of: path, interface: BlueZInterface.device))
    }

    /// Returns once `ServicesResolved` is true (GATT discovery done) in the session's cache,
    /// so the resolved services and characteristics are there to look up. Throws
    /// `.deviceDisconnected` if the device is (or becomes) disconnected, `.objectGone` when it
    /// is removed, `.bluetoothdNotRunning` if bluetoothd leaves, `.timedOut` after `timeout`.
    /// Built on the change stream; "disconnected" is confirmed with bluetoothd before it is
    /// believed, because the cache may not have seen the connection yet.
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
                // Wait for something about this device (or bluetoothd) to change.
                while true {
                    guard let change = await iterator.next() else {
                        try Task.checkCancellation()
                        throw BluetoothError.bluetoothdNotRunning   // the session closed under us
                    }
                    if change.path == path || change.path == nil { break }
                }
            }
        }
    }

    /// Returns once the device is disconnected or gone (after `disconnect()`, or to notice
    /// that the peer left). A cached "disconnected" is confirmed with bluetoothd first.
    public func waitUntilDisconnected() async throws {
        let changes = session.changes()
        let path = self.path
        let session = self.session
        var iterator = changes.makeAsyncIterator()
        while true {
            guard session.serviceState.isRunning else { return }
            let cached = DeviceProperties(session.properties(of: path, interface: BlueZInterface.device))
            if !(cached?.connected ?? false) {
                guard let fresh = try await DeviceProperties(session.currentProperties(of: path, interface: BlueZInterface.device)),
                    fresh.connected
                else { return }
            }
            while true {
                guard let change = await iterator.next() else {
                    try Task.checkCancellation()
                    return
                }
                if change.path == path || change.path == nil { break }
            }
        }
    }

    // MARK: GATT

    /// Primary and secondary services BlueZ resolved on this device.
    public func services() -> [RemoteGATTService] {
        session.handles(RemoteGATTService.self, under: path)
    }

    /// The first service with this UUID (any textual form).
    public func service(uuid: String) -> RemoteGATTService? {
        services().first { BluetoothUUID.matches($0.uuid, uuid) }
    }

    /// The characteristic with `characteristicUUID` inside the service `serviceUUID`.
    /// Throws `.notFound` naming what is missing.
    /// `characteristic(service:characteristic:)`, waiting up to `grace` for it to appear when
    /// the services resolved without it: a peripheral whose GATT database changed while the
    /// central discovered it sends Service Changed, and bluetoothd adds what is new after
    /// `ServicesResolved` already said true. Throws `.notFound` when it did not appear.
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
