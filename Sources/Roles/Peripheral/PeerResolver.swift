import BlueZ
import Machines

/// Turns the devices BlueZ names in calls on our characteristic into what events show.
enum PeerResolver {
    static func describe(_ device: DeviceReference?, in session: BluetoothSession) -> PeerDescription {
        guard let device else { return PeerDescription(address: "unknown central") }
        if let properties = session.device(device)?.properties {
            return PeerDescription(address: properties.address.description, name: properties.alias ?? properties.name,
                                   rssi: properties.rssi.map(Int.init))
        }
        return PeerDescription(address: device.address?.description ?? device.description)
    }

    /// The only device connected to `adapter`, if one: a StartNotify call's subscriber, whose options do not name it.
    static func onlyConnectedDevice(on adapter: Adapter, in session: BluetoothSession) -> DeviceReference? {
        let connected = session.connectedDevices(on: adapter)
        return connected.count == 1 ? connected[0] : nil
    }
}
