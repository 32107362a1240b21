import DBus

/// Everything `bletransfer status` shows: bluetoothd's view of each adapter, the kernel's view of each HCI controller,
/// and a verdict in one line. Codable with stable keys for `--json`: optional values are `@AlwaysEncoded` (null, never
/// left out), here and in the kernel and advertising records it includes.
public struct BluetoothStatusReport: Sendable, Codable, Hashable {
    public var bluetoothd: String  // "running", "not-running", "access-denied", "no-system-bus"
    /// The D-Bus error message behind "access-denied" / "no-system-bus".
    @AlwaysEncoded public var bluetoothdDetail: String?
    public var kernel: KernelStatus
    public var adapters: [AdapterStatus]
    /// The adapter the verdict is about (`--adapter`, or the default one).
    @AlwaysEncoded public var selectedAdapter: String?
    public var verdict: Verdict

    public struct KernelStatus: Sendable, Codable, Hashable {
        public var state: String  // "ok", "no-bluetooth-in-kernel", "error"
        @AlwaysEncoded public var detail: String?
        public var controllers: [KernelController]
    }

    public struct AdapterStatus: Sendable, Codable, Hashable {
        public var name: String
        public var path: String
        public var address: String
        @AlwaysEncoded public var alias: String?
        public var powered: Bool
        @AlwaysEncoded public var powerState: String?
        public var discovering: Bool
        @AlwaysEncoded public var roles: [String]?
        public var supportsLowEnergy: Bool
        public var supportsAdvertising: Bool
        @AlwaysEncoded public var advertising: AdvertisingCapabilities?
        public var gattServer: Bool
        /// The kernel's record of the same controller (matched by name), if it has one.
        @AlwaysEncoded public var kernel: KernelController?
    }

    public struct Verdict: Sendable, Codable, Hashable {
        public enum Status: String, Sendable, Codable, Hashable {
            case ready  // the selected adapter is present, LE-capable and powered
            /// Bluetooth cannot be used: no bus, no bluetoothd, no adapter, no LE, powered off.
            case unavailable
            case permissionDenied = "permission-denied"  // the D-Bus policy refuses us
            case unknownAdapter = "unknown-adapter"  // `--adapter` named an adapter that does not exist
        }

        public var status: Status
        public var message: String  // one line for a human
    }

    /// The kernel has no Bluetooth support (a virtual machine or a container, most often) and bluetoothd reports no
    /// adapter.
    public var hasNoBluetoothAtAll: Bool { kernel.state == "no-bluetooth-in-kernel" && adapters.isEmpty }

    /// What is wrong with a kernel without Bluetooth, whatever else is missing: the same words in `status` and in every
    /// command's error.
    public static let noBluetoothInKernel = "no Bluetooth adapter: the kernel has no Bluetooth (a VM or a container?)"

    /// The commands that fix what the report shows wrong, most likely first (`status` prints them as `fix:` lines,
    /// failing commands give the first as their `hint:`). Empty when the selected adapter is ready.
    public var fixes: [String] {
        if hasNoBluetoothAtAll {
            return ["run on a host with a Bluetooth LE adapter, or pass one through to the virtual machine (USB "
                    + "passthrough); without one, the two-host virtual lab: bash scripts/demo.sh"]
        }
        switch bluetoothd {
        case "not-running":
            return ["sudo systemctl start bluetooth   (Debian: apt install bluez, if it is not installed)"]
        case "access-denied":
            return ["let this user talk to org.bluez: install the package's D-Bus policy "
                    + "(/etc/dbus-1/system.d/bletransfer.conf, udev/bletransfer-dbus.conf in the source) "
                    + "and run as the user it names, or as a user the system's policy allows"]
        case "no-system-bus":
            return ["sudo systemctl start dbus"]
        default:
            break
        }
        switch verdict.status {
        case .ready:
            return []
        case .unknownAdapter:
            let names = adapters.map(\.name)
            return ["pick an adapter bluetoothd reports: "
                    + (names.isEmpty ? "none is reported" : names.map { "--adapter \($0)" }.joined(separator: ", "))]
        case .permissionDenied:
            return ["check the D-Bus policy for org.bluez (docs/unattended.md, \"Permissions\")"]
        case .unavailable:
            guard let name = selectedAdapter, let adapter = adapters.first(where: { $0.name == name }) else {
                return kernel.controllers.isEmpty
                    ? ["plug in a Bluetooth LE adapter (lsusb, dmesg show it), then: rfkill unblock bluetooth"]
                    : ["sudo systemctl restart bluetooth   (the kernel has the controller, bluetoothd does not show it)"]
            }
            if !adapter.supportsLowEnergy { return ["use an adapter with Bluetooth 4.0 (LE) or later: --adapter hciN"] }
            if !adapter.powered { return ["rfkill unblock bluetooth && bluetoothctl power on"] }
            return []
        }
    }

    /// Opens a session on the system bus (or the bus at `address`), reads both views and closes the session.
    public static func gather(adapterName: String?, address: String? = nil) async -> BluetoothStatusReport {
        let kernel = KernelBluetooth.report()
        let session: BluetoothSession
        do {
            if let address {
                session = try await BluetoothSession.open(address: address)
            } else {
                session = try await BluetoothSession.open()
            }
        } catch {
            let message = (error as? BluetoothError)?.description ?? "\(error)"
            return make(bluetoothd: "no-system-bus", detail: message, kernel: kernel, adapters: [], adapterName: adapterName,
                        failure: Verdict(status: .unavailable, message: message))
        }
        defer { session.close() }
        return make(session: session, kernel: kernel, adapterName: adapterName)
    }

    /// Builds the report from an open session's cache and a kernel report.
    public static func make(session: BluetoothSession, kernel: KernelBluetoothReport, adapterName: String?) -> BluetoothStatusReport {
        func failed(_ bluetoothd: String, detail: String?, _ failure: Verdict) -> BluetoothStatusReport {
            make(bluetoothd: bluetoothd, detail: detail, kernel: kernel, adapters: [], adapterName: adapterName,
                 failure: failure)
        }
        switch session.serviceState {
        case .running:
            let adapters = session.adapters().compactMap { adapter -> AdapterStatus? in
                guard let properties = adapter.properties else { return nil }
                return AdapterStatus(
                    name: adapter.name, path: adapter.path.rawValue, address: properties.address.description, alias: properties.alias,
                    powered: properties.powered, powerState: properties.powerState, discovering: properties.discovering,
                    roles: properties.roles, supportsLowEnergy: properties.supportsLowEnergy,
                    supportsAdvertising: properties.supportsAdvertising, advertising: properties.advertising,
                    gattServer: properties.hasGattManager,
                    kernel: kernel.controllers.first { $0.name == adapter.name })
            }
            return make(bluetoothd: "running", detail: nil, kernel: kernel, adapters: adapters, adapterName: adapterName, failure: nil)
        case .notRunning:
            let seen = kernel.controllers.map(\.name)
            let message = switch kernel {
            case .noBluetoothInKernel:
                noBluetoothInKernel
            case .controllers where !seen.isEmpty:
                "bluetoothd is not running (the kernel sees \(seen.joined(separator: ", ")))"
            default:
                "bluetoothd is not running"
            }
            return failed("not-running", detail: nil, Verdict(status: .unavailable, message: message))
        case .accessDenied(let detail):
            return failed("access-denied", detail: detail,
                          Verdict(status: .permissionDenied, message: BluetoothError.accessDenied("").description))
        case .busDisconnected:
            let message = "the connection to the D-Bus system bus was lost"
            return failed("no-system-bus", detail: message, Verdict(status: .unavailable, message: message))
        }
    }

    private static func make(bluetoothd: String, detail: String?, kernel: KernelBluetoothReport, adapters: [AdapterStatus],
                             adapterName: String?, failure: Verdict?) -> BluetoothStatusReport {
        let kernelStatus = switch kernel {
        case .noBluetoothInKernel:
            KernelStatus(state: "no-bluetooth-in-kernel", detail: "socket(AF_BLUETOOTH) is not supported", controllers: [])
        case .controllers(let list):
            KernelStatus(state: "ok", detail: nil, controllers: list)
        case .unavailable(let call, let errno):
            KernelStatus(state: "error", detail: "\(call) failed: \(errno)", controllers: [])
        }
        var report = BluetoothStatusReport(bluetoothd: bluetoothd, bluetoothdDetail: detail, kernel: kernelStatus,
                                           adapters: adapters, selectedAdapter: nil,
                                           verdict: failure ?? Verdict(status: .ready, message: ""))
        if failure == nil {
            (report.selectedAdapter, report.verdict) = judge(adapters: adapters, adapterName: adapterName, kernel: kernel)
        } else if let adapterName {
            report.selectedAdapter = adapterName
        }
        // No Bluetooth in the kernel and none reported: the problem to name first, whatever else is missing too.
        if report.hasNoBluetoothAtAll, report.verdict.status != .permissionDenied {
            report.verdict = Verdict(status: .unavailable, message: noBluetoothInKernel)
        }
        return report
    }

    private static func judge(adapters: [AdapterStatus], adapterName: String?, kernel: KernelBluetoothReport) -> (String?, Verdict) {
        let selected: AdapterStatus
        if let adapterName {
            guard let match = adapters.first(where: { $0.name == adapterName || $0.address.uppercased() == adapterName.uppercased() }) else {
                let error = BluetoothError.unknownAdapter(name: adapterName, available: adapters.map(\.name))
                return (adapterName, Verdict(status: .unknownAdapter, message: error.description))
            }
            selected = match
        } else {
            guard let first = adapters.first else {
                let seen = kernel.controllers.map(\.name)
                let message = seen.isEmpty
                    ? BluetoothError.noAdapter.description
                    : "no Bluetooth adapter: bluetoothd reports none, although the kernel sees \(seen.joined(separator: ", "))"
                return (nil, Verdict(status: .unavailable, message: message))
            }
            selected = first
        }
        if !selected.supportsLowEnergy {
            return (selected.name, Verdict(status: .unavailable, message: "\(selected.name) does not support Bluetooth Low Energy"))
        }
        if !selected.powered {
            let state = selected.powerState.map { " (power state \($0))" } ?? ""
            return (selected.name, Verdict(status: .unavailable,
                                           message: "\(selected.name) is powered off\(state); turn it on with `bluetoothctl power on`"))
        }
        let abilities = ["powered", "LE", selected.supportsAdvertising ? "can advertise" : "cannot advertise"]
        return (selected.name, Verdict(status: .ready, message: "\(selected.name) is ready (\(abilities.joined(separator: ", ")))"))
    }
}
