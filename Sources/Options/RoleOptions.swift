import Storage
import Transfer

/// What both roles' options name alike: the adapter, the service and its characteristic, the secure mode's keys.
package protocol RoleOptions: Sendable {
    /// "hci1"; nil: the first adapter BlueZ reports.
    var adapterName: String? { get set }
    var serviceUUID: BluetoothUUID { get set }
    var characteristicUUID: BluetoothUUID { get set }
    /// The framed protocol's keys and policy (nil: none given; the run uses a key of its own, authenticating nobody).
    var secureMode: SecureModePolicy? { get set }
    /// Not `--no-l2cap`: framed version 2 may run over an L2CAP channel.
    var usesL2CAP: Bool { get set }
}

extension SenderOptions: RoleOptions {}
extension ReceiverOptions: RoleOptions {}
