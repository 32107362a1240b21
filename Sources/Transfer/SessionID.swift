/// A random number a bletransfer central puts in its HELLO; the peripheral echoes it in the
/// framed header and the central echoes it in its ACK, so neither side can mistake a header or
/// an acknowledgement meant for another subscription (BlueZ 5.66 sends notifications to every
/// subscriber) for its own.
public struct SessionID: Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt64

    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    public static func random<Generator: RandomNumberGenerator>(using generator: inout Generator) -> SessionID {
        SessionID(rawValue: generator.next())
    }

    public static func random() -> SessionID {
        var generator = SystemRandomNumberGenerator()
        return random(using: &generator)
    }

    /// Eight bytes, most significant first.
    public var bytes: [UInt8] {
        (0..<8).map { UInt8(truncatingIfNeeded: rawValue >> (56 - 8 * $0)) }
    }

    /// Reads eight big-endian bytes; `bytes` must hold at least eight from its start index.
    init(bigEndianBytes bytes: ArraySlice<UInt8>) {
        rawValue = bytes.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    public var description: String {
        let hex = String(rawValue, radix: 16)
        return String(repeating: "0", count: 16 - hex.count) + hex
    }
}
