/// Value lengths that fill whole link-layer packets (docs/throughput.md, "The arithmetic").
///
/// Controllers with data length extension carry 251 bytes in a link-layer packet. A GATT value
/// may go out on either ATT bearer, and bluetoothd picks:
/// - the fixed channel: n + 7 bytes (L2CAP header 4, ATT opcode and handle 3), so 495 bytes
///   fill two packets;
/// - an Enhanced ATT channel (on by default since BlueZ 5.62): an L2CAP credit-based SDU of
///   n + 3 bytes plus its 2-byte length, cut into PDUs of the MPS, 247 bytes under 251-byte
///   packets, so 489 bytes fill two.
/// The value is the longest that fills whole packets on both: 489 (the lab's radio measured
/// GATT at 0.65-0.68 of a channel flood with 495-byte values, 0.71 with 512, 1.02 with 489). An
/// L2CAP channel's SDU of n bytes is n + 2 (its length) cut into the same 247-byte PDUs: 8149
/// bytes are 33 full PDUs, where 8192 needed a 34th of 43 bytes. On a link without data length
/// extension (27-byte packets) both lengths still fill their packets to within 4 %.
package enum LinkPacking {
    /// A link-layer packet's payload with data length extension.
    static let packetPayload = 251
    /// An L2CAP credit-based PDU's payload under such a packet (the kernel's MPS).
    static let channelPDUPayload = packetPayload - 4

    /// The longest GATT value of at most `maximum` bytes whose ATT PDU fills whole packets on
    /// either bearer (242, 489, 736…), or `maximum` when even one packet is more.
    package static func gattValueLength(atMost maximum: Int) -> Int {
        // k packets carry min(251k - 7, 247k - 5) bytes of value on both bearers; the second
        // is the smaller from k = 1 on.
        let packets = (maximum + 5) / channelPDUPayload
        return packets >= 1 ? packets * channelPDUPayload - 5 : maximum
    }

    /// The longest channel SDU of at most `maximum` bytes that fills whole PDUs, or `maximum`
    /// when even one PDU is more.
    package static func channelValueLength(atMost maximum: Int) -> Int {
        let pdus = (maximum + 2) / channelPDUPayload
        return pdus >= 1 ? pdus * channelPDUPayload - 2 : maximum
    }
}
