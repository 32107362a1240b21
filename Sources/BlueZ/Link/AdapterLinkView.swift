import CBlueZ

/// One LE connection the kernel has on a controller (HCIGETCONNLIST, no privilege needed).
package struct KernelLEConnection: Sendable, Hashable, Codable {
    package var handle: UInt16
    package var peer: String
    package var outgoing: Bool  // this host made the connection (it is the central)
}

extension KernelBluetooth {
    /// The LE connections of controller `index`, or nil when the kernel does not answer.
    package static func leConnections(controller index: UInt16) -> [KernelLEConnection]? {
        let capacity = 16
        var handles = [UInt16](repeating: 0, count: capacity)
        var peers = [(CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar, CChar,
                      CChar, CChar, CChar, CChar, CChar)](repeating: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
                                                          count: capacity)
        var outgoing = [UInt8](repeating: 0, count: capacity)
        let count = bletransfer_hci_le_connections(index, &handles, &peers, &outgoing, Int32(capacity))
        guard count >= 0 else { return nil }
        return (0..<Int(count)).map { i in
            let text = withUnsafeBytes(of: peers[i]) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            }
            return KernelLEConnection(handle: handles[i], peer: text, outgoing: outgoing[i] != 0)
        }
    }
}

/// What an adapter asks for new links, and the LE links it has: `bletransfer link show`.
package struct AdapterLinkView: Sendable, Codable {
    package var adapter: String
    /// 1.25 ms units; nil when the kernel did not say.
    package var connectionIntervalMin: UInt16?
    package var connectionIntervalMax: UInt16?
    package var latency: UInt16?
    package var supervisionTimeout: UInt16?  // 10 ms units
    package var advertisingIntervalMin: UInt16?  // 0.625 ms units
    package var advertisingIntervalMax: UInt16?
    /// Whether 2M is selected for new links; nil when reading it needs a privilege we lack.
    package var twoMSelected: Bool?
    package var twoMOffered: Bool?
    package var phyUnreadable: String?
    package var tuned: Bool
    package var connections: [KernelLEConnection]

    package static func gather(controller index: UInt16, name: String) async -> AdapterLinkView {
        let configuration = try? await AdapterLinkDefaults.systemConfiguration(controller: index)
        var view = AdapterLinkView(
            adapter: name,
            connectionIntervalMin: configuration?[.connectionMinInterval],
            connectionIntervalMax: configuration?[.connectionMaxInterval],
            latency: configuration?[.connectionLatency],
            supervisionTimeout: configuration?[.supervisionTimeout],
            advertisingIntervalMin: configuration?[.advertisingMinInterval],
            advertisingIntervalMax: configuration?[.advertisingMaxInterval],
            tuned: configuration.map { AdapterLinkTarget.tuned.isMet(by: $0) } ?? false,
            connections: KernelBluetooth.leConnections(controller: index) ?? [])
        do throws(ManagementError) {
            let phys = try await AdapterLinkDefaults.phyConfiguration(controller: index)
            view.twoMSelected = phys.uses2M
            view.twoMOffered = phys.offers2M
        } catch {
            view.phyUnreadable = error.isPermissionDenied ? "reading it needs CAP_NET_ADMIN" : error.description
        }
        return view
    }

    package var text: String {
        var lines: [String] = []
        let interval = if let lo = connectionIntervalMin, let hi = connectionIntervalMax {
            "\(AdapterTuning.milliseconds(lo))–\(AdapterTuning.milliseconds(hi)) ms"
        } else {
            "unknown"
        }
        lines.append("\(adapter): \(tuned ? "tuned" : "not tuned (sudo bletransfer link tune)")")
        lines.append("  new links ask for: interval \(interval), latency \(latency.map(String.init) ?? "?"), "
                     + "supervision timeout \(supervisionTimeout.map { "\(Int($0) * 10) ms" } ?? "?")")
        let phy = if let selected = twoMSelected {
            selected ? "1M and 2M" : (twoMOffered == true ? "1M only (2M offered by the controller)" : "1M only (no 2M in the controller)")
        } else {
            "unknown: \(phyUnreadable ?? "not read")"
        }
        lines.append("  PHYs for new links: \(phy)")
        if let lo = advertisingIntervalMin, let hi = advertisingIntervalMax {
            lines.append("  advertising every \(Self.ms(Double(lo) * 0.625))–\(Self.ms(Double(hi) * 0.625)) ms")
        }
        if connections.isEmpty {
            lines.append("  no LE connection")
        } else {
            for c in connections {
                lines.append("  connection \(c.handle) to \(c.peer) (\(c.outgoing ? "central" : "peripheral"))")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func ms(_ value: Double) -> String { LinkParameters.trimmed((value * 100).rounded() / 100) }
}
