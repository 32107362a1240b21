import CBlueZ
import SystemPackage

/// One HCI controller as the Linux kernel reports it (libbluetooth's `hci_devinfo`), without bluetoothd. Lets `status`
/// tell "bluetoothd is not running" (the kernel sees hci0, org.bluez has no owner) from "there is no adapter at all".
public struct KernelController: Sendable, Hashable, Codable {
    public var id: Int  // 0 for hci0
    public var name: String
    /// "00:1A:7D:DA:71:13"; all zeros until the controller was first brought up.
    public var address: String
    /// HCI_UP: the kernel has the controller running (bluetoothd powers it through mgmt).
    public var isUp: Bool
    /// LMP feature "LE Supported (Controller)"; nil when the controller was never initialised (all feature bits zero).
    @AlwaysEncoded public var supportsLowEnergy: Bool?
    public var bus: String  // as libbluetooth names it ("USB", "UART", "VIRTUAL", ...)
}

/// What the kernel says about Bluetooth on this machine.
public enum KernelBluetoothReport: Sendable, Hashable {
    /// `socket(AF_BLUETOOTH)` failed with EAFNOSUPPORT: no Bluetooth support (module not loaded, or a container/VM
    /// without it). Not an error for `status`.
    case noBluetoothInKernel
    case controllers([KernelController])  // possibly none plugged in
    /// Asking failed for another reason (e.g. EPERM under a seccomp policy).
    case unavailable(call: String, errno: Errno)

    public var controllers: [KernelController] {
        if case .controllers(let list) = self { list } else { [] }
    }
}

public enum KernelBluetooth {
    /// The HCI controllers, through HCIGETDEVLIST + HCIGETDEVINFO (no privilege needed).
    public static func report() -> KernelBluetoothReport {
        var ids = [UInt16](repeating: 0, count: 16)
        let count = ids.withUnsafeMutableBufferPointer { buffer in
            bletransfer_hci_device_ids(buffer.baseAddress, Int32(buffer.count))
        }
        if count < 0 {
            let error = Errno(rawValue: -count)
            if error == .addressFamilyNotSupported || error == .protocolNotSupported {
                return .noBluetoothInKernel
            }
            return .unavailable(call: "ioctl(HCIGETDEVLIST)", errno: error)
        }
        var controllers: [KernelController] = []
        for id in ids.prefix(Int(count)) {
            var info = hci_dev_info()
            let result = bletransfer_hci_device_info(id, &info)
            if result < 0 {
                // The controller vanished between the two calls (unplugged): skip it.
                if Errno(rawValue: -result) == .operationNotSupportedByDevice { continue }
                return .unavailable(call: "ioctl(HCIGETDEVINFO)", errno: Errno(rawValue: -result))
            }
            controllers.append(controller(from: &info))
        }
        return .controllers(controllers.sorted { $0.id < $1.id })
    }

    private static func controller(from info: inout hci_dev_info) -> KernelController {
        var nameBuffer = [CChar](repeating: 0, count: 9)
        var addressBuffer = [CChar](repeating: 0, count: 18)
        bletransfer_hci_name(&info, &nameBuffer)
        bletransfer_hci_address(&info, &addressBuffer)
        let le = bletransfer_hci_le_feature(&info)
        let bus = bletransfer_hci_bus(&info).map { String(cString: $0) } ?? "UNKNOWN"
        return KernelController(
            id: Int(info.dev_id),
            name: decodeCString(nameBuffer),
            address: decodeCString(addressBuffer),
            isUp: bletransfer_hci_is_up(&info) != 0,
            supportsLowEnergy: le < 0 ? nil : le == 1,
            bus: bus
        )
    }

    private static func decodeCString(_ buffer: [CChar]) -> String {
        let bytes = buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
