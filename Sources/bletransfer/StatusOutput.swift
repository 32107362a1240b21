import BlueZ
import Daemon
import Foundation

/// Rendering of `bletransfer status`: text for people, one JSON object for scripts.
enum StatusOutput {
    static func exitStatus(for status: BluetoothStatusReport.Verdict.Status) -> ExitStatus {
        switch status {
        case .ready: return .success
        case .unavailable: return .unavailable
        case .permissionDenied: return .permissionDenied
        case .unknownAdapter: return .usage
        }
    }

    /// `status --json`'s version; it goes up only when a key is removed, renamed or changes type or meaning.
    static let schema = 1

    static func json(_ report: BluetoothStatusReport, gatt: GATTChannelSetting = .current(),
                     link: LinkSpeedSetting = .current(), notificationQueue: NotificationQueueLimit = .current(),
                     links: StatusLinks = StatusLinks()) throws -> String {
        let encoder = JSONEncoder.sortedKeys
        let data = try encoder.encode(report)
        guard var object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return String(decoding: data, as: UTF8.self)
        }
        // The report's own contract (docs/json-events.md, "The status report").
        object["schema"] = schema
        object["fixes"] = report.fixes
        object["managerState"] = [
            "send": StatusManagerState.state(for: .peripheral, report: report).rawValue,
            "receive": StatusManagerState.state(for: .central, report: report).rawValue,
        ]
        var gattObject: [String: Any] = [
            "channels": gatt.channels, "explicit": gatt.isExplicit,
            "appleFlowOrderSafe": !gatt.allowsEnhancedATT, "appleFlowOrdering": appleFlowOrdering(gatt),
        ]
        if let file = gatt.file { gattObject["file"] = file }
        object["gatt"] = gattObject
        var linkObject: [String: Any] = [
            "exchangeMTU": link.exchangeMTU,
            "minConnectionInterval": link.minimumConnectionInterval ?? LinkSpeedSetting.kernelDefaultMinimumInterval,
            "maxConnectionInterval": link.maximumConnectionInterval ?? LinkSpeedSetting.kernelDefaultMaximumInterval,
            "connectionIntervalExplicit": link.minimumConnectionInterval != nil || link.maximumConnectionInterval != nil,
        ]
        if let file = link.file { linkObject["file"] = file }
        object["link"] = linkObject
        var queueObject: [String: Any] = ["sufficient": notificationQueue.isSufficient,
                                          "recommended": NotificationQueueLimit.recommended]
        if let datagrams = notificationQueue.datagrams { queueObject["maxDatagrams"] = datagrams }
        object["notificationQueue"] = queueObject
        object["connections"] = try JSONSerialization.jsonObject(with: try encoder.encode(links.connections))
        object["linkTuning"] = try JSONSerialization.jsonObject(with: try encoder.encode(links.adapters))
        let merged = try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])
        return String(decoding: merged, as: UTF8.self)
    }

    /// What the GATT channel setting means for peers that speak Apple's format.
    static func appleFlowOrdering(_ gatt: GATTChannelSetting) -> String {
        if gatt.allowsEnhancedATT {
            return "Apple's format from a peripheral may arrive out of order: with \(gatt.channels) GATT channels a peer "
                + "that also supports Enhanced ATT sends its notifications over several bearers (set [GATT] Channels = 1 "
                + "to receive from Apple-flow peripherals); send keeps the order with confirmed indications "
                + "(--compat-delivery auto); bletransfer's framed format is not affected"
        }
        return "Apple's format keeps its order (one ATT bearer per link)"
    }

    static func gattLine(_ gatt: GATTChannelSetting) -> String {
        let origin = gatt.isExplicit ? "set in \(gatt.file ?? "main.conf")"
            : "BlueZ default" + (gatt.file.map { ", not set in \($0)" } ?? ", no main.conf readable")
        return "GATT channels: \(gatt.channels) (\(origin)): \(appleFlowOrdering(gatt))"
    }

    /// The longest line `status` prints: longer ones wrap, their continuation indented.
    static let width = 100

    /// `line` cut at spaces into lines of at most `width` columns; continuations indented.
    static func wrapped(_ line: String, width: Int = width) -> [String] {
        guard line.count > width else { return [line] }
        let indent = String(line.prefix { $0 == " " }) + "    "
        var lines: [String] = []
        var current = ""
        for word in line.split(separator: " ", omittingEmptySubsequences: false) {
            let candidate = current.isEmpty ? String(word) : current + " " + word
            if candidate.count > width, !current.trimmingCharacters(in: .whitespaces).isEmpty {
                lines.append(current)
                current = indent + word
            } else { current = candidate }
        }
        if !current.isEmpty { lines.append(current) }
        return lines
    }

    static func text(_ report: BluetoothStatusReport, gatt: GATTChannelSetting = .current(),
                     link: LinkSpeedSetting = .current(), notificationQueue: NotificationQueueLimit = .current(),
                     links: StatusLinks = StatusLinks()) -> String {
        var lines: [String] = []
        lines.append("\(report.verdict.status == .ready ? "ready" : "not ready"): \(report.verdict.message)")
        // What fixes it, most likely first (the `hint:` lines of send, receive, pair and the daemon say the same).
        for fix in report.fixes { lines.append("fix: \(fix)") }
        if gatt.allowsEnhancedATT, report.verdict.status == .ready {
            lines.append("note: to receive from Apple-flow peripherals (iPhone, bless), set [GATT] Channels = 1 in "
                         + "/etc/bluetooth/main.conf, then: sudo systemctl restart bluetooth")
        }
        lines.append("")
        var bluetoothd = "bluetoothd: \(report.bluetoothd)"
        // The bus's AccessDenied text is a paragraph of policy; the verdict says it in one. `--json` keeps it all.
        if let detail = report.bluetoothdDetail, !detail.isEmpty, report.bluetoothd != "access-denied" {
            bluetoothd += " (\(detail))"
        }
        lines.append(bluetoothd)

        switch report.kernel.state {
        case "ok":
            let names = report.kernel.controllers.map(\.name)
            lines.append("kernel: \(names.isEmpty ? "no HCI controllers" : names.joined(separator: ", "))")
        case "no-bluetooth-in-kernel": lines.append("kernel: no Bluetooth support (socket(AF_BLUETOOTH) unsupported)")
        default: lines.append("kernel: cannot list controllers (\(report.kernel.detail ?? "unknown error"))")
        }

        let described = Set(report.adapters.map(\.name))
        for adapter in report.adapters {
            lines.append("")
            let marker = adapter.name == report.selectedAdapter ? " (selected)" : ""
            lines.append("\(adapter.name)\(marker)")
            lines.append("  bluez:   \(adapter.path)  \(adapter.address)  \(adapter.alias.map { "\"\($0)\"" } ?? "")")
            var power = "  power:   \(adapter.powered ? "on" : "off")"
            if let state = adapter.powerState { power += " (power state \(state))" }
            if adapter.discovering { power += ", discovering" }
            lines.append(power)
            let roles = adapter.roles.map { $0.isEmpty ? "none" : $0.joined(separator: ", ") } ?? "not reported"
            lines.append("  LE:      \(adapter.supportsLowEnergy ? "yes" : "no") (roles: \(roles))")
            if let advertising = adapter.advertising {
                let active = advertising.activeInstances.map(String.init) ?? "?"
                let free = advertising.supportedInstances.map(String.init) ?? "?"
                lines.append("  adverts: \(active) active, \(free) more available")
            } else { lines.append("  adverts: not supported (no LEAdvertisingManager1)") }
            lines.append("  GATT server: \(adapter.gattServer ? "yes" : "no")")
            lines.append("  kernel:  \(kernelLine(adapter.kernel))")
        }
        // Controllers the kernel has but bluetoothd hides (bluetoothd down, or unconfigured / claimed elsewhere).
        for controller in report.kernel.controllers where !described.contains(controller.name) {
            lines.append("")
            lines.append("\(controller.name) (kernel only)")
            lines.append("  kernel:  \(kernelLine(controller))")
        }
        // No Bluetooth at all (a kernel without it, nothing reported): the roles' states and
        // bluetoothd's settings say nothing more; the lines above say what to do.
        if !report.hasNoBluetoothAtAll {
            lines.append("")
            let send = StatusManagerState.state(for: .peripheral, report: report)
            let receive = StatusManagerState.state(for: .central, report: report)
            lines.append("manager state: \(send.rawValue) for send, \(receive.rawValue) for receive")
            lines.append(gattLine(gatt))
            lines.append("link: \(link.summary)")
            lines += links.lines
            lines.append("notification queue: \(notificationQueue.summary)")
        }
        return lines.flatMap { wrapped($0) }.joined(separator: "\n") + "\n"
    }

    private static func kernelLine(_ controller: KernelController?) -> String {
        guard let controller else { return "not visible (no Bluetooth in this kernel, or a different host)" }
        let le = controller.supportsLowEnergy.map { $0 ? "LE" : "no LE" } ?? "LE unknown (never initialised)"
        return "\(controller.address)  \(controller.isUp ? "UP" : "DOWN")  \(le)  bus \(controller.bus)"
    }
}
