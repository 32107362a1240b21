/// Constants and helpers of the two wire formats (see docs/wire-format.md).
///
/// **Compat** (Apple's sample): payload in values of at most MTU−3 bytes, then a value equal to
/// `EOM`. **Framed** (ours, after a HELLO): ``FramedHeader`` and payload as one byte stream in
/// values of at most MTU−3 bytes, then `EOM`; the central answers with an ``Ack``.
public enum WireFormat {
    /// The value that ends every message, in both formats.
    public static let endOfMessage: [UInt8] = [0x45, 0x4F, 0x4D]  // "EOM"

    /// The framed format this build speaks.
    public static let framedVersion: UInt8 = 1

    /// The value length every ATT bearer allows (ATT_MTU 23 − 3).
    public static let minimumValueLength = 20
    /// The longest attribute value the Core Specification allows (Vol 3, Part F, 3.2.9).
    public static let maximumValueLength = 512

    /// The longest notification value for an ATT MTU: MTU − 3, kept within
    /// `minimumValueLength...maximumValueLength` whatever the link reports.
    public static func valueLength(forATTMTU mtu: Int) -> Int {
        clampValueLength(max(mtu, minimumValueLength + 3) - 3)
    }

    static func clampValueLength(_ length: Int) -> Int {
        min(max(length, minimumValueLength), maximumValueLength)
    }

    public static func helloValue(session: SessionID) -> [UInt8] {
        Hello(session: session).encoded
    }

    public static func isHello(_ value: [UInt8]) -> Bool {
        Hello(parsing: value) != nil
    }

    public static func parseHello(_ value: [UInt8]) -> Hello? {
        Hello(parsing: value)
    }

    public static func ackValue(for header: FramedHeader) -> [UInt8] {
        Ack(acknowledging: header).encoded
    }

    /// The ACK to write for a received message; nil for compat messages (no one to tell).
    public static func ackValue(for message: ReceivedMessage) -> [UInt8]? {
        message.header.map(ackValue(for:))
    }

    public static func parseAck(_ value: [UInt8]) -> Ack? {
        Ack(parsing: value)
    }
}
