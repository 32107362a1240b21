import BlueZ
import BluetoothModel
import DBus

/// Turns the device object paths BlueZ passes to our characteristic into what events show.
enum PeerResolver {
    static func describe(devicePath: String?, in session: BluetoothSession) -> PeerDescription {
        guard let devicePath, let path = ObjectPath(rawValue: devicePath) else {
            return PeerDescription(address: "unknown central")
        }
        if let properties = session.device(at: path)?.properties {
            return PeerDescription(address: properties.address.description, name: properties.alias ?? properties.name,
                                   rssi: properties.rssi.map(Int.init))
        }
        return PeerDescription(address: BluetoothAddress(deviceObjectPath: devicePath)?.description ?? devicePath)
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
