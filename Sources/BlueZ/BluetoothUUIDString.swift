/// UUID strings as BlueZ writes them: lower-case, 128-bit, with dashes. The Transfer core owns
/// the real UUID type; this layer only compares strings, so it normalises both sides.
public enum BluetoothUUIDString {
    /// The Bluetooth base UUID suffix that 16- and 32-bit UUIDs expand into.
    static let baseSuffix = "-0000-1000-8000-00805f9b34fb"

    /// "180D", "0x180d", "0000180d", "E20A39F4-73F5-4BC4-A12F-17D1AD07A961" or the same
    /// without dashes → "0000180d-0000-1000-8000-00805f9b34fb" style. nil when not a UUID.
    public static func normalize(_ text: String) -> String? {
        var hex = text.lowercased()
        if hex.hasPrefix("0x") { hex.removeFirst(2) }
        let isHex = { (string: String) in
            !string.isEmpty && string.allSatisfy { $0.isASCII && $0.isHexDigit }
        }
        switch hex.count {
        case 4 where isHex(hex):
            return "0000" + hex + baseSuffix
        case 8 where isHex(hex):
            return hex + baseSuffix
        case 32 where isHex(hex):
            return dashed(hex)
        case 36:
            let parts = hex.split(separator: "-", omittingEmptySubsequences: false)
            guard parts.map(\.count) == [8, 4, 4, 4, 12], parts.allSatisfy({ isHex(String($0)) }) else {
                return nil
            }
            return hex
        default:
            return nil
        }
    }

    /// True when both strings name the same UUID (false when either is malformed).
    public static func matches(_ lhs: String, _ rhs: String) -> Bool {
        guard let a = normalize(lhs), let b = normalize(rhs) else { return false }
        return a == b
    }

    private static func dashed(_ hex: String) -> String {
        let characters = Array(hex)
        let groups = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32]
        return groups.map { String(characters[$0]) }.joined(separator: "-")
    }
}
