import Testing
@testable import Transfer
import TestSupport

@Suite struct MessageSenderTests {
    @Test func emptyCompatMessageIsJustEOM() {
        let sender = MessageSender(payload: [], format: .compat, maximumValueLength: 20)
        #expect(allValues(sender) == [WireFormat.endOfMessage])
        #expect(sender.valueCount == 1)
    }

    @Test func emptyFramedMessageIsHeaderWithLengthZeroThenEOM() throws {
        let hello = Hello(session: SessionID(rawValue: 42))
        let sender = MessageSender(message: OutgoingMessage(payload: []), replyingTo: hello, maximumValueLength: 512)
        let values = allValues(sender)
        #expect(values.count == 2)
        #expect(values[0].count == WireFormat.framedSequenceLength + FramedHeader.encodedLength)
        #expect(values[0][0..<2] == [0, 0])
        #expect(values[0][19..<27].allSatisfy { $0 == 0 })
        #expect(values[1] == WireFormat.endOfMessage)
        let message = try reassemble(values, hello: hello)
        #expect(message?.payload == [])
        #expect(message?.format == .framed)
    }

    @Test func payloadEqualToEOMIsSplit() {
        let values = allValues(MessageSender(payload: Array("EOM".utf8), format: .compat, maximumValueLength: 20))
        #expect(values == [Array("EO".utf8), Array("M".utf8), WireFormat.endOfMessage])
    }

    @Test func tailEqualToEOMIsSplitAfterFullValues() {
        let payload = [UInt8](repeating: 0x61, count: 20) + Array("EOM".utf8)
        let values = allValues(MessageSender(payload: payload, format: .compat, maximumValueLength: 20))
        #expect(values == [Array(payload[0..<20]), Array("EO".utf8), Array("M".utf8), WireFormat.endOfMessage])
    }

    @Test func framedTailLikeEOMIsNotSplitBecauseItCarriesASequenceNumber() throws {
        // Header (57) + 6 = 63 = 3·18 + 9: the last value is [0, 3] + 9 bytes ending in "EOM".
        let payload = Array("abcEOM".utf8)
        let hello = Hello(session: SessionID(rawValue: 1))
        let sender = MessageSender(message: OutgoingMessage(payload: payload), replyingTo: hello, maximumValueLength: 20)
        let values = allValues(sender)
        #expect(values.count == 5 && values.count == sender.valueCount)
        #expect(values[3].prefix(2) == [0, 3] && values[3].suffix(3) == WireFormat.endOfMessage[...])
        #expect(try reassemble(values, hello: hello)?.payload == payload)
    }

    @Test func firstFramedValueCarriesMagicVersionAndSessionAtTheSmallestMTU() {
        let hello = Hello(session: SessionID(rawValue: 0xFEED_FACE_CAFE_BEEF))
        var sender = MessageSender(message: OutgoingMessage(payload: [1, 2, 3]), replyingTo: hello, maximumValueLength: 20)
        let first = sender.nextValue() ?? []
        #expect(first.count == 20)
        #expect(Array(first[0..<2]) == [0, 0])
        #expect(Array(first[2..<10]) == FramedHeader.magic)
        #expect(first[10] == 1)
        #expect(Array(first[11..<19]) == hello.session.bytes)
    }

    @Test func valueLengthIsKeptWithinATTBounds() {
        #expect(MessageSender(payload: [], format: .compat, maximumValueLength: 0).maximumValueLength == 20)
        #expect(MessageSender(payload: [], format: .compat, maximumValueLength: -5).maximumValueLength == 20)
        #expect(MessageSender(payload: [], format: .compat, maximumValueLength: 514).maximumValueLength == 512)
        #expect(MessageSender(payload: [], format: .compat, maximumValueLength: .max).maximumValueLength == 512)
        #expect(WireFormat.valueLength(forATTMTU: 23) == 20)
        #expect(WireFormat.valueLength(forATTMTU: 185) == 182)
        #expect(WireFormat.valueLength(forATTMTU: 517) == 512)
        #expect(WireFormat.valueLength(forATTMTU: .min) == 20)
        #expect(WireFormat.valueLength(forATTMTU: 0) == 20)
    }

    @Test func progressCountsPayloadBytesOnly() {
        let hello = Hello(session: SessionID(rawValue: 3))
        var sender = MessageSender(
            message: OutgoingMessage(payload: [UInt8](repeating: 7, count: 100)), replyingTo: hello, maximumValueLength: 40)
        #expect(sender.progress == TransferProgress(bytesSoFar: 0, totalBytes: 100))
        _ = sender.nextValue()  // sequence number, header bytes 0..<38
        #expect(sender.bytesSent == 0)
        _ = sender.nextValue()  // sequence number, header 38..<57, payload 0..<19
        #expect(sender.bytesSent == 19)
        while sender.nextValue() != nil {}
        #expect(sender.bytesSent == 100)
        #expect(sender.isFinished)
        #expect(sender.valuesSent == sender.valueCount)
        #expect(sender.nextValue() == nil)
        #expect(sender.valuesSent == sender.valueCount)
    }

    @Test func newSubscriptionRestartsFromByteZero() {
        let message = OutgoingMessage(payload: randomBytes(1000, seed: 1))
        var first = MessageSender(message: message, replyingTo: nil, maximumValueLength: 100)
        _ = first.nextValue()
        _ = first.nextValue()
        let restarted = MessageSender(message: message, replyingTo: nil, maximumValueLength: 100)
        #expect(allValues(restarted).first == Array(message.payload[0..<100]))
    }

    @Test func contractInitialiserFramesWithTheGivenSession() throws {
        let session = SessionID(rawValue: 77)
        let sender = MessageSender(payload: [9, 9], format: .framed, maximumValueLength: 20, session: session)
        #expect(sender.header?.session == session)
        #expect(try reassemble(allValues(sender), hello: Hello(session: session))?.payload == [9, 9])
    }

    @Test func ackIdentifiesTheMessage() {
        let hello = Hello(session: SessionID(rawValue: 5))
        let sender = MessageSender(message: OutgoingMessage(payload: [1, 2, 3]), replyingTo: hello, maximumValueLength: 20)
        let header = sender.header!
        #expect(sender.isAcknowledged(by: Ack(acknowledging: header)))
        #expect(!sender.isAcknowledged(by: Ack(session: SessionID(rawValue: 6), digest: header.digest)))
        #expect(!sender.isAcknowledged(by: Ack(session: hello.session, digest: FramedHeader.sha256([1, 2]))))
        let compat = MessageSender(payload: [1, 2, 3], format: .compat, maximumValueLength: 20)
        #expect(!compat.isAcknowledged(by: Ack(acknowledging: header)))
    }
}
