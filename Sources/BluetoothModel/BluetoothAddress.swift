/// A 48-bit Bluetooth device address (BD_ADDR) as BlueZ writes it: six hex octets, most significant first, separated
/// by colons ("00:AA:01:00:00:42"). Parsing accepts either case; the text form is upper-case.
public struct BluetoothAddress: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let octets: [UInt8]  // most significant first

    /// Parses "AA:BB:CC:DD:EE:FF" (either case); nil for anything else.
    public init?(_ text: some StringProtocol) {
        self.init(octetTexts: text.split(separator: ":", omittingEmptySubsequences: false))
    }

    /// The address in a device object path's last component ("dev_AA_BB_CC_DD_EE_FF"); nil for any other path.
    public init?(deviceObjectPath path: some StringProtocol) {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return nil }
        self.init(octetTexts: last.dropFirst(4).split(separator: "_", omittingEmptySubsequences: false))
    }

    private init?(octetTexts: [some StringProtocol]) {
        let octets = octetTexts.compactMap { text in
            text.count == 2 && text.allSatisfy(\.isHexDigit) ? UInt8(text, radix: 16) : nil
        }
        guard octetTexts.count == 6, octets.count == 6 else { return nil }
        self.octets = octets
    }

    public var description: String {
        octets.map { octet in
            let digits = String(octet, radix: 16, uppercase: true)
            return digits.count == 1 ? "0" + digits : digits
        }.joined(separator: ":")
    }

    public static func < (lhs: BluetoothAddress, rhs: BluetoothAddress) -> Bool {
        lhs.octets.lexicographicallyPrecedes(rhs.octets)
    }
}

extension BluetoothAddress: Codable {
    /// Encoded as its text form ("AA:BB:CC:DD:EE:FF"), as status reports show it.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let text = try container.decode(String.self)
        guard let address = BluetoothAddress(text) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a Bluetooth address: \(text)")
        }
        self = address
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}
