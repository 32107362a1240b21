import Crypto

/// Bytes as lower-case hex (digests in events, journal lines, spool names): a table lookup a digit,
/// not Foundation's formatter for each of 32 bytes on every message.
package func lowercaseHex(_ bytes: some Sequence<UInt8>) -> String {
    var digits: [UInt8] = []
    digits.reserveCapacity(bytes.underestimatedCount * 2)
    for byte in bytes {
        digits.append(hexDigits[Int(byte >> 4)])
        digits.append(hexDigits[Int(byte & 0x0F)])
    }
    return String(decoding: digits, as: UTF8.self)
}

private let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

package func sha256(_ bytes: [UInt8]) -> [UInt8] {
    Array(SHA256.hash(data: bytes))
}
