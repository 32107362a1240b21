import BluetoothModel
import DBus
import Synchronization

/// What to advertise (org.bluez.LEAdvertisement1 properties, advertising-api.txt).
public struct AdvertisementConfiguration: Sendable, Hashable {
    public var type: String  // "peripheral" (connectable) or "broadcast"
    public var serviceUUIDs: [String]
    /// Put in the advertising data or scan response (BlueZ truncates a long name).
    public var localName: String?
    /// Includes "tx-power" (BlueZ adds the TX power level).
    public var includeTxPower: Bool
    /// General discoverable whatever the adapter's Discoverable setting (nil: the adapter's). Centrals that filter on
    /// the discoverable flag (and the BlueZoo mock) only see discoverable advertisements.
    public var discoverable: Bool?
    public var serviceData: [String: [UInt8]]
    public var manufacturerData: [UInt16: [UInt8]]

    public init(type: String = "peripheral", serviceUUIDs: [String], localName: String? = nil,
                includeTxPower: Bool = false, discoverable: Bool? = true,
                serviceData: [String: [UInt8]] = [:], manufacturerData: [UInt16: [UInt8]] = [:]) {
        self.type = type
        self.serviceUUIDs = serviceUUIDs
        self.localName = localName
        self.includeTxPower = includeTxPower
        self.discoverable = discoverable
        self.serviceData = serviceData
        self.manufacturerData = manufacturerData
    }
}

/// An exported LEAdvertisement1 registered through LEAdvertisingManager1. BlueZ calls `Release` when it drops it on its
/// own (adapter powered off or removed); it then counts as unregistered, and the next `register` starts afresh.
public final class LEAdvertisement: Sendable {
    public let session: BluetoothSession
    package let path: ObjectPath
    public let configuration: AdvertisementConfiguration
    private let registration: ManagerRegistration

    public convenience init(session: BluetoothSession, configuration: AdvertisementConfiguration) {
        self.init(session: session, configuration: configuration, path: nil)
    }

    package init(session: BluetoothSession, configuration: AdvertisementConfiguration, path: ObjectPath?) {
        self.session = session
        self.configuration = configuration
        self.path = path ?? session.makeExportPath("advertisement")
        registration = ManagerRegistration(self.path, with: .advertising, in: session)
    }

    public var isRegistered: Bool { registration.adapter != nil }

    /// Registers on `adapter`, runs `body`, then unregisters and unexports however it ends (as
    /// `LocalGATTApplication.withRegistration`). Errors keep BlueZ's names (NotPermitted when no instance is free,
    /// InvalidLength when the data does not fit).
    public func withRegistration<Outcome>(
        on adapter: Adapter, isolation: isolated (any Actor)? = #isolation,
        _ body: () async throws -> Outcome
    ) async throws -> Outcome {
        try await registration.withRegistration(on: adapter.path, export: { try self.export() },
                                                unexport: { self.unexport() }, body)
    }

    /// Runs `body` with the advertising on `adapter` under its control: not advertising at first, `body` starts and
    /// pauses it through the `AdvertisingControl` (a sender pauses while it serves a central). Leaving the scope
    /// however it ends unregisters whatever is registered then.
    public func withControl<Outcome>(
        on adapter: Adapter, isolation: isolated (any Actor)? = #isolation,
        _ body: (AdvertisingControl) async throws -> Outcome
    ) async throws -> Outcome {
        let control = AdvertisingControl(advertisement: self, adapter: adapter)
        let outcome: Result<Outcome, any Error>
        do {
            outcome = .success(try await body(control))
        } catch {
            outcome = .failure(error)
        }
        await control.close()
        return try outcome.get()
    }

    /// Exports and registers on `adapter` (test support whose lifetime is not a scope).
    package func register(on adapter: Adapter) async throws {
        try await registration.register(on: adapter.path, export: export, unexport: unexport)
    }

    /// Unregisters (errors swallowed: BlueZ may already have dropped it) and unexports.
    package func unregister() async { await registration.unregister(unexport: unexport) }

    fileprivate func unregisterOutsideCancellation() async {
        await registration.unregisterOutsideCancellation(unexport: { self.unexport() })
    }

    private func export() throws { try session.connection.export([interface()], at: path) }

    private func unexport() { session.connection.unexport(path) }

    private func interface() -> DBusInterface {
        let configuration = self.configuration
        var properties: [DBusProperty] = [
            DBusProperty(name: "Type", signature: "s", get: { .string(configuration.type) }),
            DBusProperty(name: "ServiceUUIDs", signature: "as", get: {
                .strings(configuration.serviceUUIDs.map(BluetoothUUID.canonicalOrLowercased))
            }),
        ]
        if let name = configuration.localName {
            properties.append(DBusProperty(name: "LocalName", signature: "s", get: { .string(name) }))
        }
        if configuration.includeTxPower {
            properties.append(DBusProperty(name: "Includes", signature: "as", get: { .strings(["tx-power"]) }))
        }
        if let discoverable = configuration.discoverable {
            properties.append(DBusProperty(name: "Discoverable", signature: "b", get: { .boolean(discoverable) }))
        }
        if !configuration.serviceData.isEmpty {
            let entries = configuration.serviceData.sorted { $0.key < $1.key }.map { uuid, bytes in
                DBusDictionaryEntry(key: .string(BluetoothUUID(parsing: uuid)?.canonical ?? uuid), value: .variant(.bytes(bytes)))
            }
            properties.append(DBusProperty(name: "ServiceData", signature: "a{sv}", get: {
                .dictionary(key: "s", value: "v", entries)
            }))
        }
        if !configuration.manufacturerData.isEmpty {
            let entries = configuration.manufacturerData.sorted { $0.key < $1.key }.map { company, bytes in
                DBusDictionaryEntry(key: .uint16(company), value: .variant(.bytes(bytes)))
            }
            properties.append(DBusProperty(name: "ManufacturerData", signature: "a{qv}", get: {
                .dictionary(key: "q", value: "v", entries)
            }))
        }
        let release = DBusMethod(name: "Release") { [weak self] _ in
            self?.registration.forget()
            return []
        }
        return DBusInterface(name: BlueZInterface.advertisement, methods: [release], properties: properties)
    }
}

/// Starts and pauses one advertisement inside `LEAdvertisement.withControl`; use it from the scope's task only.
public final class AdvertisingControl: Sendable {
    private let advertisement: LEAdvertisement
    private let adapter: Adapter
    private let closed = Mutex(false)

    fileprivate init(advertisement: LEAdvertisement, adapter: Adapter) {
        self.advertisement = advertisement
        self.adapter = adapter
    }

    /// Whether it is registered (BlueZ may have dropped it on its own, e.g. on power off).
    public var isAdvertising: Bool { advertisement.isRegistered }

    /// Registers unless registered, to the end even when cancelled (the scope's end undoes it). Throws BlueZ's refusal,
    /// or `CancellationError` once the scope has ended.
    public func start() async throws {
        guard !closed.withLock({ $0 }) else { throw CancellationError() }
        guard !advertisement.isRegistered else { return }
        // A call abandoned halfway may still succeed in bluetoothd: it runs to its end, and the scope's end undoes it.
        try await outsideCancellation { [advertisement, adapter] in try await advertisement.register(on: adapter) }
    }

    /// Unregisters if registered, even when the task is cancelled.
    public func pause() async {
        guard advertisement.isRegistered else { return }
        await advertisement.unregisterOutsideCancellation()
    }

    fileprivate func close() async {
        closed.withLock { $0 = true }
        await advertisement.unregisterOutsideCancellation()
    }
}
