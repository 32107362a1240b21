import Testing
@testable import Transfer
import TestSupport

@Suite struct MessageSenderTests {
    @Test func emptyCompatMessageIsJustEOM() {
        let sender = MessageSender(payload: [], maximumValueLength: 20)
        #expect(allValues(sender) == [WireFormat.endOfMessage])
        #expect(sender.valueCount == 1)
    }

    @Test func payloadEqualToEOMIsSplit() {
        let values = allValues(MessageSender(payload: Array("EOM".utf8), maximumValueLength: 20))
        #expect(values == [Array("EO".utf8), Array("M".utf8), WireFormat.endOfMessage])
    }

    @Test func tailEqualToEOMIsSplitAfterFullValues() {
        let payload = [UInt8](repeating: 0x61, count: 20) + Array("EOM".utf8)
        let values = allValues(MessageSender(payload: payload, maximumValueLength: 20))
        #expect(values == [Array(payload[0..<20]), Array("EO".utf8), Array("M".utf8), WireFormat.endOfMessage])
    }

    @Test func valueLengthIsKeptWithinATTBounds() {
        #expect(MessageSender(payload: [], maximumValueLength: 0).maximumValueLength == 20)
        #expect(MessageSender(payload: [], maximumValueLength: -5).maximumValueLength == 20)
        #expect(MessageSender(payload: [], maximumValueLength: 514).maximumValueLength == 512)
        #expect(MessageSender(payload: [], maximumValueLength: .max).maximumValueLength == 512)
        #expect(WireFormat.valueLength(forATTMTU: 23) == 20)
        #expect(WireFormat.valueLength(forATTMTU: 185) == 182)
        #expect(WireFormat.valueLength(forATTMTU: 517) == 512)
        #expect(WireFormat.valueLength(forATTMTU: .min) == 20)
        #expect(WireFormat.valueLength(forATTMTU: 0) == 20)
    }

    @Test func progressCountsPayloadBytes() {
        var sender = MessageSender(message: OutgoingMessage(payload: [UInt8](repeating: 7, count: 100)), maximumValueLength: 40)
        #expect(sender.progress == TransferProgress(bytesSoFar: 0, totalBytes: 100))
        _ = sender.nextValue()
        #expect(sender.bytesSent == 40)
        while sender.nextValue() != nil {}
        #expect(sender.bytesSent == 100)
        #expect(sender.isFinished)
        #expect(sender.valuesSent == sender.valueCount)
        #expect(sender.nextValue() == nil)
        #expect(sender.valuesSent == sender.valueCount)
    }

    @Test func newSubscriptionRestartsFromByteZero() {
        let message = OutgoingMessage(payload: randomBytes(1000, seed: 1))
        var first = MessageSender(message: message, maximumValueLength: 100)
        _ = first.nextValue()
        _ = first.nextValue()
        let restarted = MessageSender(message: message, maximumValueLength: 100)
        #expect(allValues(restarted).first == Array(message.payload[0..<100]))
    }
}
