/// Value lengths that fill whole link-layer packets (docs/throughput.md, "The arithmetic").
///
/// Controllers with data length extension carry 251 bytes in a link-layer packet. A GATT value
/// of n bytes is n + 7 bytes there (L2CAP header 4, ATT opcode and handle 3), so a 512-byte
/// value takes two full packets and one of 17 bytes, and that third exchange costs nearly as
/// much airtime as a full one: 495 bytes fill two packets exactly (the lab's radio measured
/// GATT at 0.71 of a channel flood with 512-byte values). An L2CAP channel's SDU of n bytes is
/// n + 2 (its length) cut into PDUs of the MPS, 247 bytes under 251-byte packets: 8149 bytes
/// are 33 full PDUs, where 8192 needed a 34th of 43 bytes. On a link without data length
/// extension (27-byte packets) both lengths still fill their packets to within 4 %.
package enum LinkPacking {
    /// A link-layer packet's payload with data length extension.
    static let packetPayload = 251
    /// An L2CAP channel PDU's payload under such a packet (the kernel's MPS).
    static let channelPDUPayload = packetPayload - 4

    /// The longest GATT value of at most `maximum` bytes whose ATT PDU fills whole packets
    /// (244, 495, 746…), or `maximum` when even one packet is more.
    package static func gattValueLength(atMost maximum: Int) -> Int {
        let packets = (maximum + 7) / packetPayload
        return packets >= 1 ? packets * packetPayload - 7 : maximum
    }

    /// The longest channel SDU of at most `maximum` bytes that fills whole PDUs, or `maximum`
    /// when even one PDU is more.
    package static func channelValueLength(atMost maximum: Int) -> Int {
        let pdus = (maximum + 2) / channelPDUPayload
        return pdus >= 1 ? pdus * channelPDUPayload - 2 : maximum
    }
}
