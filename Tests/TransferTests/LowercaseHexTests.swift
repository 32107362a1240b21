import Foundation
import Testing
import TestSupport
import Transfer

/// `lowercaseHex` names receipts, spool entries and every event's `sha256`: it must write what
/// `String(format: "%02x")` a byte wrote, or a receiver would not find its own journal entries
/// and spool files again after an upgrade.
@Suite struct LowercaseHexTests {
    @Test func everyByteAndSeededDigestsAsFormatWroteThem() {
        let everyByte = (0...255).map { UInt8($0) }
        #expect(lowercaseHex(everyByte) == everyByte.map { String(format: "%02x", $0) }.joined())
        for seed in 0..<64 as Range<UInt64> {
            let digest = randomBytes(32, seed: seed)
            #expect(lowercaseHex(digest) == digest.map { String(format: "%02x", $0) }.joined())
            #expect(lowercaseHex(digest.prefix(8)) == digest.prefix(8).map { String(format: "%02x", $0) }.joined())
        }
        #expect(lowercaseHex([]) == "")
    }
}
