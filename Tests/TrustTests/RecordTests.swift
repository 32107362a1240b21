import PropertyBased
import Testing

@testable import Trust

@Suite struct RecordTests {
    @Test func recordsRoundTripBothWays() throws {
        var (initiator, responder) = try handshakePair()
        let header = Record(kind: .header, content: [UInt8](repeating: 7, count: 46))
        #expect(try responder.opener.open(frame(try initiator.sealer.seal(header))) == header)
        let ack = Record(kind: .ack, content: [UInt8](repeating: 9, count: 37))
        #expect(try initiator.opener.open(frame(try responder.sealer.seal(ack))) == ack)
    }

    @Test func aSealedRecordHasTheDesignedLayout() throws {
        var (initiator, _) = try handshakePair()
        let sealed = try initiator.sealer.seal(Record(kind: .data, content: [UInt8](repeating: 0, count: 4108)))
        // type 02, length = kind + content + tag.
        #expect(sealed.count == 3 + 1 + 4108 + 16)
        #expect(Array(sealed.prefix(3)) == [0x02, 0x10, 0x1D])
    }

    @Test func everyFlippedBitIsRefusedAndClosesTheDirection() throws {
        var (sender, receiver) = try handshakePair()
        let sealed = try sender.sealer.seal(Record(kind: .data, content: Array("payload bytes".utf8)))
        // Bytes 1-2 are the length: a flipped bit there changes how much the frame reader
        // takes, covered by the truncation test; flip every other bit.
        for bit in 0..<(sealed.count * 8) where !(8..<24).contains(bit) {
            var tampered = sealed
            tampered[bit / 8] ^= 1 << (bit % 8)
            var opener = receiver.opener  // a copy: same key, same counter
            var reader = FrameReader()
            guard let frames = try? reader.append(tampered), let tamperedFrame = frames.first else { continue }
            #expect(throws: RecordError.self) { try opener.open(tamperedFrame) }
            #expect(throws: RecordError.closedAfterFailure) { try opener.open(frame(sealed)) }
        }
        // The untouched record still opens with an untouched opener.
        #expect(try receiver.opener.open(frame(sealed)).content == Array("payload bytes".utf8))
    }

    @Test func replayedReorderedAndDroppedRecordsAreRefused() throws {
        func three() throws -> ([[UInt8]], RecordOpener) {
            var (initiator, responder) = try handshakePair()
            let records = try (0..<3).map { try initiator.sealer.seal(Record(kind: .data, content: [UInt8($0)])) }
            return (records, responder.opener)
        }
        // Replay: the first record twice.
        var (records, opener) = try three()
        _ = try opener.open(frame(records[0]))
        #expect(throws: RecordError.authenticationFailed) { try opener.open(frame(records[0])) }
        // Reorder: the second before the first.
        (records, opener) = try three()
        #expect(throws: RecordError.authenticationFailed) { try opener.open(frame(records[1])) }
        // Drop: the first never arrives.
        (records, opener) = try three()
        #expect(throws: RecordError.authenticationFailed) { try opener.open(frame(records[2])) }
        // In order: all three open.
        (records, opener) = try three()
        #expect(try records.map { try opener.open(frame($0)).content } == [[0], [1], [2]])
    }

    @Test func aRecordFromTheOtherDirectionOrAnotherSessionIsRefused() throws {
        var (initiator, responder) = try handshakePair()
        let own = try initiator.sealer.seal(Record(kind: .ack, content: [1]))
        // The initiator's own opener takes the responder's direction: reflecting fails.
        #expect(throws: RecordError.authenticationFailed) { try initiator.opener.open(frame(own)) }
        var (_, other) = try handshakePair()
        #expect(throws: RecordError.authenticationFailed) { try other.opener.open(frame(own)) }
        _ = responder
    }

    @Test func theLongestRecordPassesTheFrameReader() throws {
        var (initiator, responder) = try handshakePair()
        let longest = Record(kind: .data, content: [UInt8](repeating: 0xA5, count: Record.maximumContentLength))
        let sealed = try initiator.sealer.seal(longest)
        #expect(sealed.count == Frame.headerLength + Frame.maximumBodyLength)
        #expect(try responder.opener.open(frame(sealed)) == longest)
    }

    @Test func truncatedPlainAndOverlongFramesAreRefused() throws {
        var (initiator, responder) = try handshakePair()
        let sealed = try initiator.sealer.seal(Record(kind: .end, content: [0, 0, 0, 1]))
        var cut = frame(sealed)
        cut.body.removeLast(1)
        #expect(throws: RecordError.authenticationFailed) { try responder.opener.open(cut) }

        var (_, second) = try handshakePair()
        // Type 03, the retired plain record, is no frame type any more; a handshake frame is
        // not a record.
        #expect(Frame.FrameType(rawValue: 0x03) == nil)
        #expect(throws: RecordError.notSealed) { try second.opener.open(Frame(type: .handshake, body: [1, 2])) }
        var (_, third) = try handshakePair()
        #expect(throws: RecordError.authenticationFailed) { try third.opener.open(Frame(type: .sealed, body: [1, 2])) }
        var (fourth, _) = try handshakePair()
        #expect(throws: RecordError.tooLong(Record.maximumContentLength + 1)) {
            try fourth.sealer.seal(Record(kind: .data, content: [UInt8](repeating: 0, count: Record.maximumContentLength + 1)))
        }
    }

    @Test func bothSidesRekeyAtTheSameCountAndAMismatchIsCaught() throws {
        let (initiator, responder) = try completedHandshakes()
        var sealer = try initiator.transportKeys(rekeyInterval: 3).sealer
        var sameInterval = try responder.transportKeys(rekeyInterval: 3).opener
        var otherInterval = try responder.transportKeys(rekeyInterval: 4).opener
        for index in 0..<3 {
            let sealed = try sealer.seal(Record(kind: .data, content: [UInt8(index)]))
            #expect(try sameInterval.open(frame(sealed)).content == [UInt8(index)])
            #expect(try otherInterval.open(frame(sealed)).content == [UInt8(index)])
        }
        // The 4th record is sealed under the rekeyed key: only the opener that rekeyed too opens it.
        for index in 3..<10 {
            let sealed = try sealer.seal(Record(kind: .data, content: [UInt8(index)]))
            #expect(try sameInterval.open(frame(sealed)).content == [UInt8(index)])
            if index == 3 {
                #expect(throws: RecordError.authenticationFailed) { try otherInterval.open(frame(sealed)) }
            }
        }
    }

    @Test func anyRecordSequenceRoundTrips() async {
        await propertyCheck(
            count: 60, input: Gen.uint8().array(of: 0...2000).array(of: 1...12), Gen.uint64(in: 1...5)
        ) { contents, interval throws in
            var (initiator, responder) = try handshakePair(rekeyInterval: interval)
            var reader = FrameReader()
            var stream: [UInt8] = []
            for (index, content) in contents.enumerated() {
                stream += try initiator.sealer.seal(Record(kind: RecordKind.allCases[index % 6], content: content))
            }
            // The stream arrives in arbitrary pieces; the frame reader restores the records.
            var opened: [[UInt8]] = []
            var offset = 0
            var step = 1
            while offset < stream.count {
                let end = min(stream.count, offset + step)
                for frame in try reader.append(stream[offset..<end]) {
                    opened.append(try responder.opener.open(frame).content)
                }
                offset = end
                step = step * 3 % 517 + 1
            }
            #expect(opened == contents)
            #expect(reader.bufferedByteCount == 0)
        }
    }

    @Test func theFrameReaderRefusesUnknownTypesAndOverlongLengthsBeforeBuffering() throws {
        var reader = FrameReader()
        #expect(throws: FrameError.unknownType(0x07)) { try reader.append([0x07, 0, 1]) }
        var other = FrameReader()
        #expect(throws: FrameError.tooLong(0xFFFF)) { try other.append([0x02, 0xFF, 0xFF, 1, 2]) }
        #expect(throws: FrameError.closedAfterFailure) { try other.append([0x01, 0, 0]) }
        var partial = FrameReader()
        #expect(try partial.append([0x01, 0x00]).isEmpty)
        #expect(try partial.append([0x02, 0xAA]).isEmpty)
        #expect(try partial.append([0xBB, 0x03, 0x00]) == [Frame(type: .handshake, body: [0xAA, 0xBB])])
        #expect(partial.bufferedByteCount == 2)
    }
}

func frame(_ bytes: [UInt8]) -> Frame {
    var reader = FrameReader()
    let frames = try! reader.append(bytes)
    precondition(frames.count == 1 && reader.bufferedByteCount == 0)
    return frames[0]
}
