import BluetoothModel
import DBus

/// What to advertise (org.bluez.LEAdvertisement1 properties, advertising-api.txt).
public struct AdvertisementConfiguration: Sendable, Hashable {
    /// "peripheral" (connectable) or "broadcast".
    public var type: String
    public var serviceUUIDs: [String]
    /// Put in the advertising data or scan response (BlueZ truncates a long name).
    public var localName: String?
    /// Includes "tx-power" (BlueZ adds the TX power level).
    public var includeTxPower: Bool
    /// Advertise as general discoverable regardless of the adapter's Discoverable setting.
    /// nil leaves it to the adapter. Centrals that filter on the discoverable flag (and the
    /// BlueZoo mock) only see discoverable advertisements.
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

/// An exported LEAdvertisement1 registered through LEAdvertisingManager1. BlueZ calls
/// `Release` when it drops the advertisement on its own (adapter powered off or removed);
/// it then counts as unregistered, and the next `register` starts afresh.
public final class LEAdvertisement: Sendable {
    public let session: BluetoothSession
    package let path: ObjectPath
    public let configuration: AdvertisementConfiguration
    private let registration: ManagerRegistration

    /// An advertisement to be exported at a fresh path of the session's.
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

    /// Exports the advertisement and registers it on `adapter`. Errors keep BlueZ's names
    /// (e.g. org.bluez.Error.NotPermitted when no instance is free, InvalidLength when the
    /// data does not fit).
    public func register(on adapter: Adapter) async throws {
        try await registration.register(on: adapter.path, export: export, unexport: unexport)
    }

    /// Unregisters (errors swallowed: on teardown BlueZ may already have dropped it) and
    /// removes the exported object.
    public func unregister() async {
        await registration.unregister(unexport: unexport)
    }

    private func markReleased() {
        registration.forget()
    }

    private func export() throws {
        try session.connection.export([interface()], at: path)
    }

    private func unexport() {
        session.connection.unexport(path)
    }

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
            self?.markReleased()
            return []
        }
        return DBusInterface(name: BlueZInterface.advertisement, methods: [release], properties: properties)
    }
}
