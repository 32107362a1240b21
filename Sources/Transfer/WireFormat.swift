/// Constants and helpers of the two wire formats (see docs/wire-formats.md).
///
/// **Compat** (Apple's sample): payload in values of at most MTU−3 bytes, then a value equal to
/// `EOM`. **Framed** (ours, after a HELLO): ``FramedHeader`` and payload as one byte stream cut
/// into pieces of at most MTU−5 bytes, each sent as `[sequence number (2 bytes)][piece]`, then a
/// bare `EOM`; the central answers with an ``Ack``. The sequence numbers let the receiver put
/// values back in order: BlueZ with several ATT bearers (EATT) may deliver them reordered.
public enum WireFormat {
    /// The value that ends every message, in both formats.
    public static let endOfMessage: [UInt8] = [0x45, 0x4F, 0x4D]  // "EOM"

    /// The framed format this build speaks.
    public static let framedVersion: UInt8 = 1

    /// Bytes of the big-endian sequence number that starts every framed value but `EOM`.
    public static let framedSequenceLength = 2

    /// How far (in values) a framed value may arrive ahead of the next one the receiver needs;
    /// also how many values a receiver that wrote a HELLO holds while it cannot yet tell framed
    /// from compat. Bounds the reorder buffer to this many values.
    public static let reorderWindow = 256

    /// The sequence number of a framed value (at least `framedSequenceLength` bytes).
    static func sequenceNumber(of value: ArraySlice<UInt8>) -> UInt16 {
        UInt16(value[value.startIndex]) << 8 | UInt16(value[value.startIndex + 1])
    }

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
