import BluetoothModel
import DBus

/// What BlueZ says about an adapter (Adapter1, plus LEAdvertisingManager1 and GattManager1 when present).
public struct AdapterProperties: Sendable, Hashable, Codable {
    public var address: BluetoothAddress
    public var addressType: String?
    public var name: String?
    public var alias: String?
    public var powered: Bool
    /// "on", "off", "off-enabling", "on-disabling", "off-blocked" (experimental in 5.66: may be absent).
    public var powerState: String?
    public var discoverable: Bool
    public var discovering: Bool
    /// "central", "peripheral", "central-peripheral" (5.66 lists them only for LE-capable controllers); nil when
    /// absent (older BlueZ).
    public var roles: [String]?
    public var uuids: [String]
    public var advertising: AdvertisingCapabilities?  // present when the adapter exports LEAdvertisingManager1
    public var hasGattManager: Bool  // it exports GattManager1: local GATT applications can be registered

    /// Adapter1 has no LE flag in 5.66: `Roles` lists central/peripheral only for LE controllers; without `Roles`,
    /// LEAdvertisingManager1 (only registered for LE controllers) decides.
    public var supportsLowEnergy: Bool {
        if let roles { return roles.contains("central") || roles.contains("peripheral") }
        return advertising != nil
    }

    /// The adapter can advertise (LEAdvertisingManager1 present, peripheral role if known).
    public var supportsAdvertising: Bool {
        guard advertising != nil else { return false }
        if let roles { return roles.contains("peripheral") }
        return true
    }

    init?(_ interfaces: [String: [String: DBusValue]]) {
        guard let adapter = interfaces[BlueZInterface.adapter],
              let address = adapter["Address"]?.string.flatMap({ BluetoothAddress($0) })
        else { return nil }
        self.address = address
        addressType = adapter["AddressType"]?.string
        name = adapter["Name"]?.string
        alias = adapter["Alias"]?.string
        powered = adapter["Powered"]?.bool ?? false
        powerState = adapter["PowerState"]?.string
        discoverable = adapter["Discoverable"]?.bool ?? false
        discovering = adapter["Discovering"]?.bool ?? false
        roles = adapter["Roles"]?.strings
        uuids = adapter["UUIDs"]?.strings ?? []
        advertising = interfaces[BlueZInterface.advertisingManager].map(AdvertisingCapabilities.init)
        hasGattManager = interfaces[BlueZInterface.gattManager] != nil
    }
}

/// org.bluez.LEAdvertisingManager1's properties.
public struct AdvertisingCapabilities: Sendable, Hashable, Codable {
    @AlwaysEncoded public var activeInstances: Int?  // advertisements currently registered
    @AlwaysEncoded public var supportedInstances: Int?  // further advertisements the controller can take
    public var supportedIncludes: [String]  // "tx-power", "appearance", "local-name"

    init(_ properties: [String: DBusValue]) {
        activeInstances = properties["ActiveInstances"]?.byte.map(Int.init)
        supportedInstances = properties["SupportedInstances"]?.byte.map(Int.init)
        supportedIncludes = properties["SupportedIncludes"]?.strings ?? []
    }
}

public enum DiscoveryTransport: String, Sendable {
    case auto, bredr, le
}

/// An adapter (`/org/bluez/hciN`). A handle: properties are read from the cache each time, methods call bluetoothd.
public struct Adapter: Sendable, Hashable, CustomStringConvertible, BlueZObjectHandle {
    static let interface = BlueZInterface.adapter

    public let session: BluetoothSession
    package let path: ObjectPath

    public var name: String { String(path.rawValue.split(separator: "/").last ?? "") }

    /// The N of hciN, for ordering (hci2 before hci10); Int.max when the name has no number.
    var index: Int { Int(name.drop { !$0.isNumber }) ?? Int.max }

    public var description: String { name }

    /// Current properties; nil once the adapter is gone.
    public var properties: AdapterProperties? {
        session.interfaces(at: path).flatMap { AdapterProperties($0) }
    }

    // MARK: Power and discovery

    public func setPowered(_ powered: Bool) async throws {
        try await session.setProperty(path: path, interface: BlueZInterface.adapter, name: "Powered",
                                      value: .boolean(powered))
    }

    /// UUID strings are normalised to BlueZ's 128-bit form; `duplicateData: true` keeps reporting a device on every
    /// advertisement (RSSI updates).
    public func setDiscoveryFilter(uuids: [String] = [], transport: DiscoveryTransport = .le, rssi: Int16? = nil,
                                   duplicateData: Bool? = nil) async throws {
        var filter: [String: DBusValue] = ["Transport": .string(transport.rawValue)]
        if !uuids.isEmpty {
            filter["UUIDs"] = .strings(uuids.map(BluetoothUUID.canonicalOrLowercased))
        }
        if let rssi { filter["RSSI"] = .int16(rssi) }
        if let duplicateData { filter["DuplicateData"] = .boolean(duplicateData) }
        _ = try await session.call(path: path, interface: BlueZInterface.adapter, method: "SetDiscoveryFilter",
                                   arguments: [.vardict(filter)])
    }

    public func startDiscovery() async throws {
        _ = try await session.call(path: path, interface: BlueZInterface.adapter, method: "StartDiscovery")
    }

    /// Stops our discovery session; "not discovering" (Failed "No discovery started") is no error: it is stopped.
    public func stopDiscovery() async throws {
        try await session.call(path: path, interface: BlueZInterface.adapter, method: "StopDiscovery") { error in
            if case .bluez(let kind, _) = error { [.failed, .notReady, .notAuthorized].contains(kind) } else { false }
        }
    }

    /// Forgets a device (BlueZ disconnects it first).
    public func removeDevice(_ device: Device) async throws {
        _ = try await session.call(path: path, interface: BlueZInterface.adapter, method: "RemoveDevice",
                                   arguments: [.objectPath(device.path)])
    }

    /// Asks bluetoothd to remove `device`, returning once the request is on the bus: for a connected device it replies
    /// only after disconnecting, which starts after a 2 s timer (adapter.c `remove_device`, device.c
    /// `DISCONNECT_TIMER`) and completes whether or not anyone waits.
    public func requestRemoval(of device: Device) async throws {
        try await session.callWithoutReply(path: path, interface: BlueZInterface.adapter, method: "RemoveDevice",
                                           arguments: [.objectPath(device.path)])
    }

    // MARK: Devices

    /// Devices BlueZ currently knows under this adapter (discovered, cached or paired).
    public func devices() -> [Device] {
        session.handles(Device.self, under: path)
            .filter { $0.cachedProperties?["Adapter"]?.objectPath ?? path == path }
    }

    public func device(address: BluetoothAddress) -> Device? {
        devices().first { $0.properties?.address == address }
    }

    /// Devices advertising (or known to offer) `serviceUUID`: first those BlueZ already knows (it sends no
    /// InterfacesAdded for them), then each new or updated one discovery reports (run `startDiscovery()`). Ends when
    /// bluetoothd or the adapter goes away, or the consumer stops.
    public func sightings(serviceUUID: String?) -> AsyncStream<DeviceSighting> {
        let wanted = serviceUUID.flatMap(BluetoothUUID.init(parsing:))
        let session = self.session
        let adapterPath = self.path

        @Sendable func matches(_ properties: DeviceProperties) -> Bool {
            guard let wanted else { return true }
            return properties.uuids.contains { BluetoothUUID(parsing: $0) == wanted }
                || properties.serviceData.keys.contains { BluetoothUUID(parsing: $0) == wanted }
        }

        // Read after the stream subscribed, so nothing between the two is missed.
        let known = {
            self.devices().filter { device in device.properties.map(matches) ?? false }
                .map { DeviceSighting(device: $0, kind: .alreadyKnown) }
        }
        return session.stream(initial: known) { change in
            switch change {
            case .interfacesAdded(let path, let interfaces):
                guard interfaces[BlueZInterface.device] != nil, path.isDescendant(of: adapterPath),
                    let device = session.device(at: path), let properties = device.properties, matches(properties)
                else { return [] }
                return [DeviceSighting(device: device, kind: .discovered)]
            case .propertiesChanged(let path, BlueZInterface.device, let changed, _):
                // These change when an advertisement is received again.
                let advertisementKeys: Set<String> = ["RSSI", "UUIDs", "ServiceData", "ManufacturerData", "TxPower", "Name"]
                guard path.isDescendant(of: adapterPath), !advertisementKeys.isDisjoint(with: changed.keys),
                    let device = session.device(at: path), let properties = device.properties, matches(properties)
                else { return [] }
                return [DeviceSighting(device: device, kind: .updated)]
            case .interfacesRemoved(let path, let names) where path == adapterPath && names.contains(BlueZInterface.adapter):
                return nil
            case .serviceVanished, .accessDenied:
                return nil
            default:
                return []
            }
        }
    }
}

/// A device reported by `Adapter.sightings(serviceUUID:)`.
public struct DeviceSighting: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable {
        case alreadyKnown  // in BlueZ's cache when we started looking (may be stale)
        case discovered  // newly found (InterfacesAdded)
        case updated  // seen again: advertisement data or RSSI changed
    }

    public var device: Device
    public var kind: Kind
}
