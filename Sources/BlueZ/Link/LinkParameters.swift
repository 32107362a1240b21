/// An LE PHY as HCI numbers it.
package enum LEPHY: UInt8, Sendable, Hashable, Codable, CustomStringConvertible {
    case le1M = 1
    case le2M = 2
    case coded = 3

    package var description: String { ["1M", "2M", "Coded"][Int(rawValue) - 1] }
}

/// What one LE connection runs at, as the controller reported it in its events; nil what they have not said yet (a
/// link made before the watch started knows only what later events changed).
package struct LinkParameters: Sendable, Hashable {
    package var handle: UInt16
    package var intervalUnits: UInt16?  // 1.25 ms units
    package var latency: UInt16?
    package var supervisionTimeoutUnits: UInt16?  // 10 ms units
    package var transmitPHY: LEPHY?
    package var receivePHY: LEPHY?
    /// Link-layer payload bytes each way.
    package var transmitOctets: UInt16?
    package var receiveOctets: UInt16?
    package var isCentral: Bool?  // this host is the link's central
    /// The peer's address, "AA:BB:CC:DD:EE:FF", as the connection's event gave it.
    package var peer: String?

    package init(handle: UInt16) { self.handle = handle }

    package var intervalMilliseconds: Double? { intervalUnits.map { Double($0) * 1.25 } }
    package var supervisionTimeoutMilliseconds: Int? { supervisionTimeoutUnits.map { Int($0) * 10 } }

    /// "2M · 7.5 ms · 251 B", with what is known.
    package var summary: String {
        var parts: [String] = []
        if let phy = transmitPHY { parts.append(phy.description) }
        if let interval = intervalMilliseconds { parts.append("\(Self.trimmed(interval)) ms") }
        if let octets = transmitOctets { parts.append("\(octets) B") }
        return parts.joined(separator: " · ")
    }

    package static func trimmed(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(value)
    }
}

/// Keeps the parameters of each LE connection of one controller from the HCI events that report them (Core Vol 4 Part
/// E 7.7.65: LE (Enhanced) Connection Complete, Connection Update Complete, Data Length Change, PHY Update Complete;
/// 7.7.5: Disconnection Complete). Pure: `apply` takes one event packet as a raw HCI socket delivers it (type byte
/// 0x04, event code, length, parameters).
package struct LinkEventLedger: Sendable {
    package private(set) var links: [UInt16: LinkParameters] = [:]

    /// Takes one packet; returns the handle whose parameters changed (nil: nothing changed).
    @discardableResult
    package mutating func apply(_ packet: [UInt8]) -> UInt16? {
        guard packet.count >= 3, packet[0] == 0x04, packet.count >= 3 + Int(packet[2]) else { return nil }
        let body = Array(packet[3..<(3 + Int(packet[2]))])
        switch packet[1] {
        case 0x05 where body.count >= 4 && body[0] == 0:  // Disconnection Complete
            let handle = UInt16(littleEndianBytes: body[1..<3]) & 0x0FFF
            return links.removeValue(forKey: handle) == nil ? nil : handle
        case 0x3E where !body.isEmpty:
            return applyLEMeta(subevent: body[0], Array(body.dropFirst()))
        default:
            return nil
        }
    }

    private mutating func applyLEMeta(subevent: UInt8, _ p: [UInt8]) -> UInt16? {
        func u16(_ at: Int) -> UInt16 { UInt16(littleEndianBytes: p[at..<(at + 2)]) }
        switch subevent {
        case 0x01 where p.count >= 18 && p[0] == 0, 0x0A where p.count >= 30 && p[0] == 0:
            // Connection Complete (and Enhanced: two resolvable addresses before the interval).
            let handle = u16(1) & 0x0FFF
            let at = subevent == 0x01 ? 11 : 23
            var link = LinkParameters(handle: handle)
            link.isCentral = p[3] == 0
            link.peer = p[5..<11].reversed().map { byte in
                let hex = String(byte, radix: 16, uppercase: true)
                return hex.count == 1 ? "0" + hex : hex
            }.joined(separator: ":")
            link.intervalUnits = u16(at)
            link.latency = u16(at + 2)
            link.supervisionTimeoutUnits = u16(at + 4)
            // Every link starts on 1M with 27-byte packets (Core Vol 6 Part B 4.5.10, 5.1.10).
            link.transmitPHY = .le1M
            link.receivePHY = .le1M
            link.transmitOctets = 27
            link.receiveOctets = 27
            links[handle] = link
            return handle
        case 0x03 where p.count >= 9 && p[0] == 0:  // Connection Update Complete
            return update(u16(1) & 0x0FFF) { link in
                link.intervalUnits = u16(3)
                link.latency = u16(5)
                link.supervisionTimeoutUnits = u16(7)
            }
        case 0x07 where p.count >= 10:  // Data Length Change
            return update(u16(0) & 0x0FFF) { link in
                link.transmitOctets = u16(2)
                link.receiveOctets = u16(6)
            }
        case 0x0C where p.count >= 5 && p[0] == 0:  // PHY Update Complete
            return update(u16(1) & 0x0FFF) { link in
                link.transmitPHY = LEPHY(rawValue: p[3])
                link.receivePHY = LEPHY(rawValue: p[4])
            }
        default:
            return nil
        }
    }

    /// Applies `change` to the link `handle` (new when unknown); returns the handle.
    private mutating func update(_ handle: UInt16, _ change: (inout LinkParameters) -> Void) -> UInt16 {
        change(&links[handle, default: LinkParameters(handle: handle)])
        return handle
    }
}
