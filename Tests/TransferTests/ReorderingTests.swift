import PropertyBased
import Testing
@testable import Transfer
import TestSupport

/// Framed messages survive notifications that overtake each other (BlueZ with EATT spreads one
/// characteristic's notifications over several ATT bearers); compat is read in arrival order.
@Suite struct ReorderingTests {
    let hello = Hello(session: SessionID(rawValue: 0x0BAD_CAFE))

    static let payloads: [(name: String, bytes: [UInt8])] = [
        ("empty", []),
        ("one byte", [0x4D]),
        ("multi-byte UTF-8 text", Array(String(repeating: "héllo wörld — 日本語 🎉 ", count: 30).utf8)),
        ("binary 64 KiB", randomBytes(64 * 1024, seed: 64)),
    ]

    func framedValues(_ payload: [UInt8], valueLength: Int) -> [[UInt8]] {
        allValues(MessageSender(message: OutgoingMessage(payload: payload), replyingTo: hello, maximumValueLength: valueLength))
    }

    /// Feeds values in the given order; returns the message, failing if it completes early.
    func feed(_ values: [[UInt8]], to receiver: inout MessageReceiver) throws(ReceiveError) -> ReceivedMessage? {
        for (index, value) in values.enumerated() {
            if case .complete(let message) = try receiver.receive(value) {
                return index == values.count - 1 ? message : nil
            }
        }
        return nil
    }

    @Test func shuffledFramedValuesReassembleAtEveryMTU() throws {
        var generator = SeededGenerator(seed: 1)
        for (name, payload) in Self.payloads {
            for mtu in RoundTripTests.allMTUs {
                let values = framedValues(payload, valueLength: WireFormat.valueLength(forATTMTU: mtu))
                let shuffled = shuffledWithin(values, displacement: 8, using: &generator)
                #expect(maximumDisplacement(values, shuffled) <= 8)
                let message = try reassemble(shuffled, hello: hello)
                #expect(message?.payload == payload, "\(name) at MTU \(mtu)")
                #expect(message?.format == .framed, "\(name) at MTU \(mtu)")
            }
        }
    }

    @Test func shuffledRandomMessagesReassemble() async {
        await propertyCheck(
            count: 300,
            input: Gen.uint8().array(of: 0...4000), Gen.int(in: 23...517), Gen.int(in: 0...40), Gen.uint64()
        ) { payload, mtu, displacement, seed throws in
            var generator = SeededGenerator(seed: seed)
            let values = framedValues(payload, valueLength: mtu - 3)
            let shuffled = shuffledWithin(values, displacement: displacement, using: &generator)
            var receiver = MessageReceiver(sentHello: hello)
            #expect(try feed(shuffled, to: &receiver)?.payload == payload)
            #expect(receiver.isComplete && receiver.bufferedByteCount == 0)
        }
    }

    @Test func endOfMessageMayOvertakeEveryValue() throws {
        for payload in [[], Array("hi".utf8), randomBytes(2000, seed: 3)] {
            let values = framedValues(payload, valueLength: 182)
            let eomFirst = [values[values.count - 1]] + values.dropLast()
            var receiver = MessageReceiver(sentHello: hello)
            #expect(try receiver.receive(eomFirst[0]) == .progress(TransferProgress(bytesSoFar: 0, totalBytes: nil)))
            #expect(receiver.detectedFormat == nil && receiver.endOfMessageSeen)
            #expect(try feed(Array(eomFirst.dropFirst()), to: &receiver)?.payload == payload)
            // Backwards: every value but the first overtakes it.
            #expect(try reassemble(Array(values.reversed()), hello: hello)?.payload == payload)
        }
    }

    @Test func progressCountsContiguousBytesOnly() throws {
        let payload = randomBytes(100, seed: 5)
        let values = framedValues(payload, valueLength: 40)  // pieces of 38: header 38 | header 19 + 19 | 38 | 38 | 5
        var receiver = MessageReceiver(sentHello: hello)
        #expect(try receiver.receive(values[0]) == .progress(TransferProgress(bytesSoFar: 0, totalBytes: nil)))
        #expect(receiver.detectedFormat == .framed)
        #expect(try receiver.receive(values[2]) == .progress(TransferProgress(bytesSoFar: 0, totalBytes: nil)))
        #expect(receiver.valuesHeldOutOfOrder == 1)
        #expect(try receiver.receive(values[1]) == .progress(TransferProgress(bytesSoFar: 57, totalBytes: 100)))
        #expect(receiver.valuesHeldOutOfOrder == 0)
        #expect(try receiver.receive(values[4]) == .progress(TransferProgress(bytesSoFar: 57, totalBytes: 100)))
        #expect(try receiver.receive(values[3]) == .progress(TransferProgress(bytesSoFar: 100, totalBytes: 100)))
        guard case .complete(let message) = try receiver.receive(values[5]) else {
            Issue.record("expected completion")
            return
        }
        #expect(message.payload == payload)
    }

    @Test func aMissingValueMakesTheReceiverWaitThenReportTheGap() throws {
        let payload = randomBytes(1000, seed: 6)
        let values = framedValues(payload, valueLength: 100)  // pieces of 98
        var lostBeforeEOM = MessageReceiver(sentHello: hello)
        var withoutEOM = MessageReceiver(sentHello: hello)
        for (index, value) in values.enumerated() where index != 3 {
            guard case .progress = try lostBeforeEOM.receive(value) else {
                Issue.record("completed without value 3")
                return
            }
            if value != WireFormat.endOfMessage { _ = try withoutEOM.receive(value) }
        }
        // Three values of 98 stream bytes: the header and 237 payload bytes, in order.
        #expect(lostBeforeEOM.progress == TransferProgress(bytesSoFar: 237, totalBytes: 1000))
        #expect(lostBeforeEOM.endOfMessageSeen && !lostBeforeEOM.isComplete)
        #expect(lostBeforeEOM.valuesHeldOutOfOrder == values.count - 5)
        #expect(lostBeforeEOM.bufferedByteCount <= 57 + payload.count)
        #expect(lostBeforeEOM.finishWithoutEOM() == .truncatedPayload(received: 237, announced: 1000))
        #expect(withoutEOM.finishWithoutEOM() == .missingEndOfMessage(received: 237, announced: 1000))
        #expect(lostBeforeEOM.bufferedByteCount == 0 && withoutEOM.bufferedByteCount == 0)

        // A lost first value: the format stays undecided.
        var lostStart = MessageReceiver(sentHello: hello)
        for value in values.dropFirst() { _ = try lostStart.receive(value) }
        #expect(lostStart.detectedFormat == nil)
        #expect(lostStart.finishWithoutEOM() == .missingStartOfMessage(valuesReceived: values.count - 1))
    }

    @Test func duplicatesAreRefused() throws {
        let values = framedValues(randomBytes(500, seed: 7), valueLength: 50)
        var ahead = MessageReceiver(sentHello: hello)
        _ = try ahead.receive(values[0])
        _ = try ahead.receive(values[4])
        #expect(throws: ReceiveError.duplicateValue(sequence: 4)) { try ahead.receive(values[4]) }

        var behind = MessageReceiver(sentHello: hello)
        for value in values.prefix(6) { _ = try behind.receive(value) }
        #expect(throws: ReceiveError.duplicateValue(sequence: 2)) { try behind.receive(values[2]) }
        #expect(behind.bufferedByteCount == 0)

        // While undecided, a repeated sequence number cannot be framed: it is a compat peer.
        let repeated: [[UInt8]] = [[0, 7, 1], [0, 7, 1], WireFormat.endOfMessage]
        let compat = try reassemble(repeated, hello: hello)
        #expect(compat?.format == .compat && compat?.payload == [0, 7, 1, 0, 7, 1])

        var twice = MessageReceiver(sentHello: hello)
        _ = try twice.receive(values[0])
        _ = try twice.receive(WireFormat.endOfMessage)
        #expect(throws: ReceiveError.valueAfterEndOfMessage) { try twice.receive(WireFormat.endOfMessage) }
    }

    @Test func valuesTooFarAheadAreRefused() throws {
        let values = framedValues(randomBytes(20_000, seed: 8), valueLength: 20)
        var receiver = MessageReceiver(sentHello: hello)
        _ = try receiver.receive(values[0])
        // Value 1 is missing; 2…256 fit in the window (255 ahead of 1), 257 does not.
        for value in values[2...256] { _ = try receiver.receive(value) }
        #expect(receiver.valuesHeldOutOfOrder == 255)
        #expect(throws: ReceiveError.reorderWindowExceeded(sequence: 257, expected: 1)) {
            try receiver.receive(values[257])
        }
        #expect(receiver.bufferedByteCount == 0)
        #expect(!ReceiveError.reorderWindowExceeded(sequence: 257, expected: 1).description.contains("\n"))
    }

    @Test func framedValuesAfterCompletionOrPastTheLengthAreRefused() throws {
        let values = framedValues(randomBytes(100, seed: 9), valueLength: 40)
        var receiver = MessageReceiver(sentHello: hello)
        for value in values { _ = try receiver.receive(value) }
        #expect(receiver.isComplete)
        #expect(throws: ReceiveError.valueAfterEndOfMessage) { try receiver.receive(values[2]) }

        // An extra value past the announced length, arriving before the last real one.
        let extra: [UInt8] = [0, UInt8(values.count - 1), 0xAA]
        var early = MessageReceiver(sentHello: hello)
        var order = Array(values.dropLast())
        order.insert(extra, at: 2)
        #expect(throws: ReceiveError.dataAfterAnnouncedLength(announced: 100)) {
            for value in order { _ = try early.receive(value) }
        }

        var short = MessageReceiver(sentHello: hello)
        _ = try short.receive(values[0])
        #expect(throws: ReceiveError.malformedFramedValue(length: 2)) { try short.receive([0, 1]) }
    }

    /// Apple's sample and bless ignore HELLO: their values in arrival order are the payload.
    @Test func compatPeerAfterHelloIsDetected() throws {
        // Text decides at the first value (UTF-8 text never starts with a 0 byte).
        let text = Array("hello from a peer that ignores HELLO, in twenty-byte values".utf8)
        var receiver = MessageReceiver(sentHello: hello)
        let values = appleStyleValues(text)
        _ = try receiver.receive(values[0])
        #expect(receiver.detectedFormat == .compat)
        #expect(try feed(Array(values.dropFirst()), to: &receiver)?.payload == text)

        // Binary values that look like framed values after the first are held until one cannot be.
        var lookalike: [UInt8] = []
        for sequence in 1...300 { lookalike += [0, UInt8(sequence % 256)] + randomBytes(18, seed: UInt64(sequence)) }
        var holding = MessageReceiver(sentHello: hello)
        let binaryValues = appleStyleValues(lookalike)
        _ = try holding.receive(binaryValues[0])
        #expect(holding.detectedFormat == nil)
        let message = try feed(Array(binaryValues.dropFirst()), to: &holding)
        #expect(message?.format == .compat && message?.payload == lookalike)
        #expect(holding.valuesReceived == binaryValues.count)
    }

    /// Sequence numbers wrap after 65536 values; no framed value ever equals EOM, including the
    /// one value that would (sequence 0x454F carrying a last piece "M").
    @Test func sequenceNumbersWrapAndNoValueEqualsEOM() throws {
        // Stream = 57 + payload; at 18 bytes per piece, value 83279 (sequence 0x454F after one
        // wrap) would hold the single last byte.
        let valueCount = 65536 + 0x454F + 1
        var payload = randomBytes((valueCount - 1) * 18 + 1 - 57, seed: 10)
        payload[payload.count - 1] = 0x4D  // "M"
        let sender = MessageSender(message: OutgoingMessage(payload: payload), replyingTo: hello, maximumValueLength: 20)
        let values = allValues(sender)
        #expect(values.count == valueCount + 1 && values.count == sender.valueCount)
        let misnumbered = values.dropLast().indices.filter {
            WireFormat.sequenceNumber(of: values[$0][...]) != UInt16(truncatingIfNeeded: $0)
        }
        #expect(misnumbered.isEmpty)
        #expect(!values.dropLast().contains(WireFormat.endOfMessage))
        #expect(values.dropLast().allSatisfy { $0.count <= 20 && $0.count > 2 })
        #expect(values[values.count - 2].count == 4)  // the piece before it gave up one byte
        #expect(values[values.count - 3].count == 19)

        var generator = SeededGenerator(seed: 11)
        let shuffled = shuffledWithin(values, displacement: 8, using: &generator)
        #expect(try reassemble(shuffled, hello: hello)?.payload == payload)

        // Without the wrap: sequence 0x454F in the first round.
        var short = randomBytes(0x454F * 18 + 1 - 57, seed: 12)
        short[short.count - 1] = 0x4D
        let shortValues = framedValues(short, valueLength: 20)
        #expect(!shortValues.dropLast().contains(WireFormat.endOfMessage))
        #expect(try reassemble(shortValues, hello: hello)?.payload == short)
    }

    /// Whatever a hostile peer sends, the receiver holds no more than the limit, the header and
    /// (while undecided) two bytes per held value.
    @Test func hostileValuesKeepTheReceiverBounded() async {
        await propertyCheck(
            count: 300,
            input: Gen.int(in: 0...2000), Gen.bool, Gen.uint64(), Gen.int(in: 1...600)
        ) { limit, startFramed, seed, count in
            var generator = SeededGenerator(seed: seed)
            var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: limit), sentHello: hello)
            var values: [[UInt8]] = []
            if startFramed {
                let header = FramedHeader(session: hello.session, payloadLength: limit, digest: randomBytes(32, seed: seed))
                values.append([0, 0] + header.encoded)
            }
            for _ in 0..<count {
                let sequence = UInt16.random(in: 0...300, using: &generator)
                let length = Int.random(in: 0...512, using: &generator)
                values.append([UInt8(sequence >> 8), UInt8(sequence & 0xFF)] + randomBytes(length, seed: generator.next()))
                if Int.random(in: 0..<50, using: &generator) == 0 { values.append(WireFormat.endOfMessage) }
            }
            let bound = limit + FramedHeader.encodedLength + WireFormat.framedSequenceLength * WireFormat.reorderWindow
            for value in values {
                do {
                    _ = try receiver.receive(value)
                } catch {
                    #expect(receiver.bufferedByteCount == 0)
                    break
                }
                #expect(receiver.bufferedByteCount <= bound)
                #expect(receiver.valuesHeldOutOfOrder < WireFormat.reorderWindow)
            }
            #expect(receiver.finishWithoutEOM() != nil || receiver.isComplete)
        }
    }
}
