/// The two wire formats (docs/wire-formats.md): Apple's flow and bletransfer's own.
package enum TransferFormat: String, Sendable, Equatable, Codable {
    /// Apple's sample: the payload in values of at most MTU−3 bytes, then `EOM`; any third party's.
    case compat
    /// bletransfer's framed protocol (version 2): Noise XX, every later byte sealed, ACK authenticated (wire-v2.md).
    case secure
}

package enum WireFormat {
    /// The value that ends every message (and every secure stream).
    package static let endOfMessage: [UInt8] = [0x45, 0x4F, 0x4D]  // "EOM"

    /// The value length every ATT bearer allows (ATT_MTU 23 − 3).
    package static let minimumValueLength = 20
    /// The longest attribute value the Core Specification allows (Vol 3, Part F, 3.2.9).
    package static let maximumValueLength = 512

    /// MTU − 3, kept within `minimumValueLength...maximumValueLength` whatever the link reports.
    package static func valueLength(forATTMTU mtu: Int) -> Int {
        clampValueLength(max(mtu, minimumValueLength + 3) - 3)
    }

    static func clampValueLength(_ length: Int) -> Int {
        min(max(length, minimumValueLength), maximumValueLength)
    }
}
