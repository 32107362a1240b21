/// What the LE link under a role runs at and what holds each setting back (docs/throughput.md).
/// Unreadable values are nil; `unreadable` says why (the interval needs CAP_NET_RAW).
package struct LinkReport: Sendable, Equatable {
    package var peer: String?
    /// "1M", "2M" or "Coded", this host's transmit side.
    package var phy: String?
    package var intervalMilliseconds: Double?
    package var latency: Int?
    package var supervisionTimeoutMilliseconds: Int?
    /// Link-layer payload bytes this host sends per packet.
    package var dataLength: Int?
    /// The adapter asks for the fast link (this run tuned it, or it was already).
    package var tuned: Bool
    /// Each setting not at its best, and why.
    package var limits: [Limit]
    /// Why the nil values could not be read.
    package var unreadable: String?

    /// A setting held back ("2M PHY", "interval") by "peer", "controller", "configuration" or "privilege", and why.
    package struct Limit: Sendable, Equatable {
        package var setting: String
        package var by: String
        package var detail: String

        package init(setting: String, by: String, detail: String) {
            self.setting = setting
            self.by = by
            self.detail = detail
        }
    }

    package init(peer: String? = nil, phy: String? = nil, intervalMilliseconds: Double? = nil, latency: Int? = nil,
                supervisionTimeoutMilliseconds: Int? = nil, dataLength: Int? = nil, tuned: Bool,
                limits: [Limit] = [], unreadable: String? = nil) {
        self.peer = peer
        self.phy = phy
        self.intervalMilliseconds = intervalMilliseconds
        self.latency = latency
        self.supervisionTimeoutMilliseconds = supervisionTimeoutMilliseconds
        self.dataLength = dataLength
        self.tuned = tuned
        self.limits = limits
        self.unreadable = unreadable
    }

    /// "2M · 7.5 ms · 251 B", with what is known ("" when nothing is).
    package var summary: String {
        var parts: [String] = []
        if let phy { parts.append(phy) }
        if let interval = intervalMilliseconds {
            parts.append((interval == interval.rounded() ? String(Int(interval)) : String(interval)) + " ms")
        }
        if let dataLength { parts.append("\(dataLength) B") }
        return parts.joined(separator: " · ")
    }
}
