import BluetoothModel
import DBus

/// A service on a remote device (org.bluez.GattService1 under a device path).
public struct RemoteGATTService: Sendable, Hashable, CustomStringConvertible, BlueZObjectHandle {
    static let interface = BlueZInterface.gattService

    public let session: BluetoothSession
    package let path: ObjectPath

    private var cached: [String: DBusValue] { cachedProperties ?? [:] }

    /// Lower-case 128-bit, as BlueZ reports it ("" once the service is gone).
    public var uuid: String { cached["UUID"]?.string ?? "" }
    public var isPrimary: Bool { cached["Primary"]?.bool ?? false }
    public var description: String { "service \(uuid) (\(path))" }

    public func characteristics() -> [RemoteGATTCharacteristic] {
        session.handles(RemoteGATTCharacteristic.self, under: path)
    }

    public func characteristic(uuid: String) -> RemoteGATTCharacteristic? {
        characteristics().first { BluetoothUUID.matches($0.uuid, uuid) }
    }
}

public enum GATTWriteType: String, Sendable, Hashable {
    case command  // write without response (ATT Write Command): no acknowledgement, the fast path
    case request  // write with response (ATT Write Request): waits for the peer's acknowledgement
}

/// What BlueZ says about a remote characteristic.
public struct RemoteCharacteristicProperties: Sendable, Hashable {
    public var uuid: String
    public var flags: [GATTCharacteristicFlag]
    /// The ATT MTU of the link (GattCharacteristic1.MTU, BlueZ ≥ 5.62).
    public var mtu: Int?

    init?(_ properties: [String: DBusValue]?) {
        guard let properties else { return nil }
        uuid = properties["UUID"]?.string ?? ""
        flags = (properties["Flags"]?.strings ?? []).map(GATTCharacteristicFlag.init(bluezName:))
        mtu = properties["MTU"]?.uint16.map(Int.init)
    }
}

/// A characteristic on a remote device. Notifications arrive as a stream of `Value` changes (`startNotify` +
/// `valueUpdates`) or through a socket (`acquireNotify`).
public struct RemoteGATTCharacteristic: Sendable, Hashable, CustomStringConvertible, BlueZObjectHandle {
    static let interface = BlueZInterface.gattCharacteristic

    public let session: BluetoothSession
    package let path: ObjectPath

    public var properties: RemoteCharacteristicProperties? { RemoteCharacteristicProperties(cachedProperties) }

    public var uuid: String { properties?.uuid ?? "" }
    public var flags: [GATTCharacteristicFlag] { properties?.flags ?? [] }
    public var mtu: Int? { properties?.mtu }
    public var description: String { "characteristic \(uuid) (\(path))" }

    // MARK: Read / write

    public func readValue(offset: Int = 0) async throws -> [UInt8] {
        var options: [String: DBusValue] = [:]
        if offset > 0 { options["offset"] = .uint16(UInt16(clamping: offset)) }
        let reply = try await session.call(path: path, interface: BlueZInterface.gattCharacteristic, method: "ReadValue",
                                           arguments: [.vardict(options)])
        guard let bytes = reply.first?.bytes else {
            throw BluetoothError.bluez(.dbusInvalidArguments, message: "ReadValue replied without a byte array")
        }
        return bytes
    }

    public func writeValue(_ value: [UInt8], type: GATTWriteType = .request) async throws {
        _ = try await session.call(path: path, interface: BlueZInterface.gattCharacteristic, method: "WriteValue",
                                   arguments: [.bytes(value), .vardict(["type": .string(type.rawValue)])])
    }

    // MARK: Notifications through PropertiesChanged

    /// Values from `PropertiesChanged` on `Value`, in order; call BEFORE `startNotify()` so the first is not missed.
    /// Ends when the characteristic goes away (disconnect removes it), bluetoothd leaves, or the consumer stops.
    public func valueUpdates() -> AsyncStream<[UInt8]> {
        let path = self.path
        return session.stream { change in
            switch change {
            case .propertiesChanged(path, BlueZInterface.gattCharacteristic, let changed, _):
                changed["Value"]?.bytes.map { [$0] } ?? []
            case .interfacesRemoved(path, _), .serviceVanished, .accessDenied:
                nil
            default:
                []
            }
        }
    }

    public func startNotify() async throws {
        _ = try await session.call(path: path, interface: BlueZInterface.gattCharacteristic, method: "StartNotify")
    }

    /// Ends our notify session. Not notifying / already gone is not an error.
    public func stopNotify() async throws {
        try await session.call(path: path, interface: BlueZInterface.gattCharacteristic, method: "StopNotify") { error in
            switch error {
            case .objectGone, .bluez(.failed, _), .bluez(.notConnected, _): true
            default: false
            }
        }
    }

    // MARK: Sockets

    /// `AcquireNotify({})`: BlueZ enables notifications and hands over a SOCK_SEQPACKET socket (one packet per
    /// notification) and the ATT MTU. Locks out `StartNotify` until the socket is closed; close it to unsubscribe.
    public func acquireNotify() async throws -> NotificationSocket {
        let reply = try await session.call(path: path, interface: BlueZInterface.gattCharacteristic,
                                           method: "AcquireNotify", arguments: [.vardict([:])])
        guard reply.count >= 2, let descriptor = reply[0].unixFD, let mtu = reply[1].uint16,
            let fd = descriptor.take()
        else {
            for value in reply { value.unixFD?.close() }
            throw BluetoothError.bluez(.dbusInvalidArguments, message: "AcquireNotify replied without (fd, mtu)")
        }
        return try NotificationSocket(adopting: fd, mtu: Int(mtu))
    }
}
