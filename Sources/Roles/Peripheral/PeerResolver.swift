import BlueZ
import DBus

/// Turns the device object paths BlueZ passes to our characteristic into what events show.
enum PeerResolver {
    static func describe(devicePath: String?, in session: BluetoothSession) -> PeerDescription {
        guard let devicePath, let path = ObjectPath(rawValue: devicePath) else {
            return PeerDescription(address: "unknown central")
        }
        if let properties = session.device(at: path)?.properties {
            return PeerDescription(address: properties.address, name: properties.alias ?? properties.name,
                                   rssi: properties.rssi.map(Int.init))
        }
        return PeerDescription(address: address(fromDevicePath: devicePath) ?? devicePath)
    }

    /// "AA:BB:CC:DD:EE:FF" from ".../dev_AA_BB_CC_DD_EE_FF".
    static func address(fromDevicePath path: String) -> String? {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return nil }
        let octets = last.dropFirst(4).split(separator: "_")
        guard octets.count == 6, octets.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isHexDigit) }) else { return nil }
        return octets.joined(separator: ":")
    }

    static func connectedDevices(under adapter: ObjectPath, in session: BluetoothSession) -> [ObjectPath] {
        session.paths(implementing: BlueZInterface.device, under: adapter).filter {
            session.device(at: $0)?.properties?.connected == true
        }
    }

    /// The device path when exactly one device is connected to `adapter`: the subscriber of
    /// a StartNotify call, which carries no options naming it.
    static func onlyConnectedDevice(under adapter: ObjectPath, in session: BluetoothSession) -> String? {
        let connected = connectedDevices(under: adapter, in: session)
        return connected.count == 1 ? connected[0].rawValue : nil
    }
}
