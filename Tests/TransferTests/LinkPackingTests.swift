import Testing
@testable import Transfer

@Suite("Value lengths that fill whole link-layer packets")
struct LinkPackingTests {
    @Test("GATT: 242 fills one 251-byte packet on either bearer, 489 two; shorter maxima stay")
    func gatt() {
        #expect(LinkPacking.gattValueLength(atMost: 514) == 489)   // ATT MTU 517
        #expect(LinkPacking.gattValueLength(atMost: 512) == 489)
        #expect(LinkPacking.gattValueLength(atMost: 488) == 242)
        #expect(LinkPacking.gattValueLength(atMost: 244) == 242)   // ATT MTU 247
        #expect(LinkPacking.gattValueLength(atMost: 242) == 242)
        #expect(LinkPacking.gattValueLength(atMost: 241) == 241)
        #expect(LinkPacking.gattValueLength(atMost: 20) == 20)
    }

    /// Link-layer packets of at most 251 bytes that a value of `n` bytes takes on the fixed ATT
    /// channel (4 bytes of L2CAP header, 3 of ATT) and on an Enhanced ATT channel (an SDU of
    /// n + 3 with its 2-byte length, in PDUs of 247 bytes each under a 4-byte header).
    static func packets(fixed n: Int) -> Int { (n + 7 + 250) / 251 }
    static func packets(enhanced n: Int) -> Int { (n + 3 + 2 + 246) / 247 }

    @Test("every packed value fills its packets on both bearers, and one byte more takes another")
    func filled() {
        for maximum in 242...4096 {
            let value = LinkPacking.gattValueLength(atMost: maximum)
            #expect(value <= maximum)
            #expect(maximum - value < 247)
            #expect(Self.packets(fixed: value) == Self.packets(enhanced: value))
            #expect(Self.packets(enhanced: value + 1) == Self.packets(enhanced: value) + 1)
        }
    }

    @Test("a channel's 8 KiB SDU becomes 33 whole 247-byte PDUs")
    func channel() {
        #expect(LinkPacking.channelValueLength(atMost: 8192) == 8149)
        #expect((8149 + 2) % 247 == 0)
        #expect(LinkPacking.channelValueLength(atMost: 245) == 245)
        #expect(LinkPacking.channelValueLength(atMost: 100) == 100)
    }
}
