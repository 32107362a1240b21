/// Value lengths that fill whole link-layer packets (docs/throughput.md, "The arithmetic").
///
/// With data length extension a link-layer packet carries 251 bytes. bluetoothd sends a GATT value on either bearer:
/// the fixed channel, n + 7 bytes (L2CAP 4, ATT opcode and handle 3: 495 fill two packets), or Enhanced ATT (default
/// since BlueZ 5.62), an SDU of n + 3 plus its 2-byte length cut into 247-byte PDUs (489 fill two). 489 fills whole
/// packets on both (the lab measured GATT at 0.65-0.68 of a channel flood with 495, 0.71 with 512, 1.02 with 489). A
/// channel SDU of n bytes is n + 2 in the same PDUs: 8149 are 33 full ones, 8192 needed a 34th of 43 bytes. Without
/// data length extension (27-byte packets) both still fill packets to within 4 %.
package enum LinkPacking {
    /// A link-layer packet's payload with data length extension.
    static let packetPayload = 251
    /// An L2CAP credit-based PDU's payload under such a packet (the kernel's MPS).
    static let channelPDUPayload = packetPayload - 4

    /// The longest GATT value ≤ `maximum` filling whole packets on either bearer (242, 489, 736…), else `maximum`.
    package static func gattValueLength(atMost maximum: Int) -> Int {
        // k packets carry min(251k - 7, 247k - 5) bytes of value on both bearers; the second is smaller from k = 1.
        let packets = (maximum + 5) / channelPDUPayload
        return packets >= 1 ? packets * channelPDUPayload - 5 : maximum
    }

    /// The longest channel SDU ≤ `maximum` filling whole PDUs, or `maximum` when one PDU is more.
    package static func channelValueLength(atMost maximum: Int) -> Int {
        let pdus = (maximum + 2) / channelPDUPayload
        return pdus >= 1 ? pdus * channelPDUPayload - 2 : maximum
    }
}
