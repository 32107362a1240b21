/// The framed version 1, retired (no release shipped it), recognised only to refuse it with one line: a central's
/// version-1 HELLO (`89 42 4C 54 48` "\x89BLTH", version 1, an 8-byte session, 14 bytes) and a sender's version-1
/// stream (sequence number 0, then the header magic `89 42 4C 54 46 0D 0A 1A` "\x89BLTF\r\n\x1A" and version 1).
package enum RetiredVersion1 {
    package static func isHello(_ value: [UInt8]) -> Bool {
        value.count == 14 && value.starts(with: [0x89, 0x42, 0x4C, 0x54, 0x48]) && value[5] == 1
    }

    package static func startsStream(_ value: [UInt8]) -> Bool {
        value.count >= 11 && value.starts(with: [0x00, 0x00, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A]) && value[10] == 1
    }
}
