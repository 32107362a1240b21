import Testing
@testable import Transfer

@Suite("Value lengths that fill whole link-layer packets")
struct LinkPackingTests {
    @Test("GATT: 244 fills one 251-byte packet, 495 two; shorter maxima stay as they are")
    func gatt() {
        #expect(LinkPacking.gattValueLength(atMost: 514) == 495)   // ATT MTU 517
        #expect(LinkPacking.gattValueLength(atMost: 512) == 495)
        #expect(LinkPacking.gattValueLength(atMost: 494) == 244)
        #expect(LinkPacking.gattValueLength(atMost: 244) == 244)   // ATT MTU 247
        #expect(LinkPacking.gattValueLength(atMost: 243) == 243)
        #expect(LinkPacking.gattValueLength(atMost: 20) == 20)
    }

    @Test("every packed value fills its packets: the PDU is a multiple of 251 bytes")
    func filled() {
        for maximum in 244...4096 {
            let value = LinkPacking.gattValueLength(atMost: maximum)
            #expect(value <= maximum)
            #expect((value + 7) % 251 == 0)
            #expect(maximum - value < 251)
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
