import BlueZ
import Daemon

/// `status`'s view of the links: whether each adapter asks for the fast link, and each live LE
/// connection with what the bletransfer process on it could read of it (`LinkRecords`).
struct StatusLinks: Sendable {
    struct Adapter: Sendable, Encodable {
        var name: String
        var tuned: Bool
        /// The kernel's default interval for new links, "7.5–15 ms".
        var interval: String?
    }

    struct Connection: Sendable, Encodable {
        var adapter: String
        var handle: Int
        var peer: String
        var role: String
        /// What the bletransfer process on this link read of it (nil: no bletransfer process holds it, or none could).
        var link: LinkRecords.Link?
        var process: Int?
    }

    var adapters: [Adapter] = []
    var connections: [Connection] = []

    static func gather() async -> StatusLinks {
        var view = StatusLinks()
        let records = LinkRecords.all()
        for controller in KernelBluetooth.report().controllers.sorted(by: { $0.id < $1.id }) {
            let index = UInt16(controller.id)
            let configuration = try? await AdapterLinkDefaults.systemConfiguration(controller: index)
            var interval: String?
            if let lo = configuration?[.connectionMinInterval], let hi = configuration?[.connectionMaxInterval] {
                interval = "\(AdapterTuning.milliseconds(lo))–\(AdapterTuning.milliseconds(hi)) ms"
            }
            view.adapters.append(Adapter(name: controller.name,
                                         tuned: configuration.map { AdapterLinkTarget.tuned.isMet(by: $0) } ?? false,
                                         interval: interval))
            for connection in KernelBluetooth.leConnections(controller: index) ?? [] {
                let holder = records.first { $0.adapter == controller.name && $0.links.contains { $0.handle == Int(connection.handle) } }
                view.connections.append(Connection(
                    adapter: controller.name, handle: Int(connection.handle), peer: connection.peer,
                    role: connection.outgoing ? "central" : "peripheral",
                    link: holder?.links.first { $0.handle == Int(connection.handle) }, process: holder?.pid))
            }
        }
        return view
    }

    var lines: [String] {
        var lines: [String] = []
        for adapter in adapters {
            let asks = adapter.interval.map { ": new links ask for \($0)" } ?? ""
            lines.append("link tuning: \(adapter.name) " + (adapter.tuned
                ? "tuned\(asks) and 2M"
                : "not tuned\(asks); `sudo bletransfer link tune` asks for 7.5–15 ms and 2M"))
        }
        if connections.isEmpty { lines.append("connections: none") }
        for c in connections {
            let what = c.link?.text ?? "no bletransfer process on it"
            lines.append("connection: \(c.adapter) \(c.handle) \(c.role) of \(c.peer): \(what)")
        }
        return lines
    }
}
