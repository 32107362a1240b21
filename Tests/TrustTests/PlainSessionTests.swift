import Crypto
import PropertyBased
import Synchronization
import TestSupport
import Testing

@testable import Trust

/// Version 2's plain mode (no keys): the prefix without `secure`, no handshake, plain records
/// (type `03`, `kind | content`) in both directions, and the same message rules as the secure
/// mode: `meta`, `multi` and `resume`, the length and SHA-256 checked at END, the ACK naming
/// the full digest.
@Suite struct PlainSessionTests {
    static let payloadLengths = [0, 1, 4096, 70_000]
    static let valueLengths = [20, 182, 509]

    static func hello(offered: Capabilities) -> HelloV2 {
        HelloV2(session: SessionPair.testSession, offered: offered)
    }

    static func digest(_ payload: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: payload)) }

    /// What a plain frame says (a fresh plain opener: plain records carry no counter).
    static func message(_ frame: Frame) throws -> RecordMessage {
        var opener = RecordOpener.plain
        return try RecordMessage(parsing: try opener.open(frame))
    }

    // MARK: - Record layer

    @Test func plainRecordsHaveTheDesignedLayoutAndRoundTrip() throws {
        var sealer = RecordSealer.plain
        var opener = RecordOpener.plain
        #expect(sealer.isPlain)
        let content = testPayload(4108)
        let data = try sealer.seal(Record(kind: .data, content: content))
        // type 03, length = kind + content, no tag; the content in clear.
        #expect(data.count == Frame.headerLength + 1 + 4108)
        #expect(Array(data.prefix(4)) == [0x03, 0x10, 0x0D, 0x02])
        #expect(Array(data.dropFirst(4)) == content)
        #expect(try sealer.seal(Record(kind: .close, content: [])) == [0x03, 0x00, 0x01, 0x06])
        #expect(try opener.open(frame(data)) == Record(kind: .data, content: content))
        #expect(try opener.open(Frame(type: .plain, body: [0x06])) == Record(kind: .close, content: []))

        let records = RecordKind.allCases.enumerated().map { Record(kind: $1, content: testPayload($0 * 50, seed: UInt64($0))) }
        for record in records {
            #expect(try opener.open(frame(try sealer.seal(record))) == record)
        }
        #expect(sealer.recordsSealed == 2 + UInt64(records.count))
        #expect(opener.recordsOpened == 2 + UInt64(records.count))
    }

    @Test func thePlainRecordLimitsHold() throws {
        var sealer = RecordSealer.plain
        let longest = Record(kind: .data, content: [UInt8](repeating: 0x5A, count: Record.maximumContentLength))
        let sealed = try sealer.seal(longest)
        #expect(sealed.count == Frame.headerLength + 1 + Record.maximumContentLength)
        var opener = RecordOpener.plain
        #expect(try opener.open(frame(sealed)) == longest)
        #expect(throws: RecordError.tooLong(Record.maximumContentLength + 1)) {
            try sealer.seal(Record(kind: .data, content: [UInt8](repeating: 0, count: Record.maximumContentLength + 1)))
        }
        // A plain body one byte over (the frame reader would let a sealed one of that length
        // through) is refused, and the opener stays closed.
        var overlong = RecordOpener.plain
        let body = [RecordKind.data.rawValue] + [UInt8](repeating: 0, count: Record.maximumContentLength + 1)
        #expect(throws: RecordError.tooLong(body.count)) { try overlong.open(Frame(type: .plain, body: body)) }
        #expect(throws: RecordError.closedAfterFailure) { try overlong.open(frame(sealed)) }
        var empty = RecordOpener.plain
        #expect(throws: RecordError.unknownKind(0)) { try empty.open(Frame(type: .plain, body: [])) }
        var unknown = RecordOpener.plain
        #expect(throws: RecordError.unknownKind(8)) { try unknown.open(Frame(type: .plain, body: [8, 1, 2])) }
    }

    @Test func aPlainOpenerRefusesSealedAndHandshakeFramesAndClosesAfter() throws {
        var (initiator, _) = try handshakePair()
        let sealed = try initiator.sealer.seal(Record(kind: .data, content: [1, 2, 3]))
        var plain = RecordSealer.plain
        let genuine = try plain.seal(Record(kind: .data, content: [1, 2, 3]))

        var opener = RecordOpener.plain
        #expect(throws: RecordError.notPlain) { try opener.open(frame(sealed)) }
        #expect(throws: RecordError.closedAfterFailure) { try opener.open(frame(genuine)) }
        #expect(opener.recordsOpened == 0)

        var other = RecordOpener.plain
        #expect(throws: RecordError.notPlain) { try other.open(Frame(type: .handshake, body: [UInt8](repeating: 0, count: 32))) }
        #expect(throws: RecordError.closedAfterFailure) { try other.open(frame(genuine)) }

        // An untouched plain opener still opens the plain record.
        var fresh = RecordOpener.plain
        #expect(try fresh.open(frame(genuine)).content == [1, 2, 3])
    }

    @Test func aSealedOpenerRefusesAPlainFrameAndClosesAfter() throws {
        var (initiator, responder) = try handshakePair()
        #expect(!initiator.sealer.isPlain)
        let sealed = try initiator.sealer.seal(Record(kind: .ack, content: [9]))
        var plain = RecordSealer.plain
        let plainFrame = try plain.seal(Record(kind: .ack, content: [9]))
        var opener = responder.opener  // a copy: same key, same counter
        #expect(throws: RecordError.notSealed) { try opener.open(frame(plainFrame)) }
        #expect(throws: RecordError.closedAfterFailure) { try opener.open(frame(sealed)) }
        #expect(try responder.opener.open(frame(sealed)).content == [9])
    }

    @Test func anyPlainRecordSequenceRoundTripsInAnyPieces() async {
        await propertyCheck(count: 60, input: Gen.uint8().array(of: 0...5000).array(of: 1...12)) { contents throws in
            var sealer = RecordSealer.plain
            var opener = RecordOpener.plain
            var reader = FrameReader()
            var stream: [UInt8] = []
            for (index, content) in contents.enumerated() {
                stream += try sealer.seal(Record(kind: RecordKind.allCases[index % 6], content: content))
            }
            var opened: [[UInt8]] = []
            var offset = 0
            var step = 1
            while offset < stream.count {
                let end = min(stream.count, offset + step)
                for frame in try reader.append(stream[offset..<end]) {
                    #expect(frame.type == .plain)
                    opened.append(try opener.open(frame).content)
                }
                offset = end
                step = step * 3 % 517 + 1
            }
            #expect(opened == contents)
            #expect(reader.bufferedByteCount == 0)
        }
    }

    // MARK: - One message, plain sender and plain receiver

    @Test(arguments: payloadLengths, valueLengths)
    func aMessageCrossesInOrderAndShuffled(payloadLength: Int, valueLength: Int) throws {
        let payload = testPayload(payloadLength, seed: UInt64(payloadLength) + 3)
        let digest = Self.digest(payload)
        // A keyless central's offer, and one that offers everything (`secure` included): the
        // plain sender never chooses `secure`; `resume` costs nothing without a checkpoint.
        for (offered, expected) in [([], []), ([.secure, .meta, .multi, .resume], [.resume])] as [(Capabilities, Capabilities)] {
            for seed in [nil, UInt64(payloadLength * 1000 + valueLength)] as [UInt64?] {
                let label = "offered \(offered.rawValue), \(seed == nil ? "in order" : "shuffled")"
                var pair = try SessionPair(plainPayload: payload, valueLength: valueLength, offered: offered)
                #expect(pair.sender.chosen == expected, "\(label)")
                #expect(!pair.sender.isSecure, "\(label)")
                let transcript = exchange(&pair, shuffle: seed)
                #expect(transcript.receiverError == nil, "\(label)")
                #expect(transcript.senderError == nil, "\(label)")
                #expect(transcript.completedPayload == payload, "\(label)")
                let headers: [MessageHeader] = transcript.receiverEvents.compactMap { if case .header(let header) = $0 { header } else { nil } }
                #expect(headers == [MessageHeader(message: 0, payloadLength: UInt64(payloadLength), digest: digest)], "\(label)")
                #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream], "\(label)")
                #expect(!transcript.receiverEvents.contains { if case .senderAuthenticated = $0 { true } else { false } }, "\(label)")
                // The receiver's ACK is accepted: the only event on the sender's side.
                #expect(transcript.senderEvents == [.acknowledged(alreadyStored: false)], "\(label)")
                #expect(pair.sender.state == .acknowledged, "\(label)")
                #expect(pair.sender.acknowledgedCount == 1, "\(label)")
                #expect(pair.sender.payloadBytesSent == payloadLength, "\(label)")
                #expect(pair.sender.endOfMessageSent, "\(label)")
                #expect(pair.sender.remotePeer == nil && pair.receiver.remotePeer == nil, "\(label)")
                #expect(!pair.receiver.isSecure, "\(label)")
                #expect(pair.receiver.completedCount == 1, "\(label)")

                // The notification stream: the prefix without `secure`, then plain frames only
                // (no handshake), HEADER first, DATA in order, END, CLOSE 00.
                #expect(SecureReceiverSession.startsVersion2Stream(transcript.notified[0]), "\(label)")
                let stream = streamBytes(transcript.notified)
                let prefix = try StreamPrefix(parsing: Array(stream.prefix(StreamPrefix.encodedLength)), hello: Self.hello(offered: offered))
                #expect(prefix.chosen == expected, "\(label)")
                #expect(!prefix.chosen.contains(.secure), "\(label)")
                #expect(stream[StreamPrefix.encodedLength] == Frame.FrameType.plain.rawValue, "\(label)")
                #expect(stream[StreamPrefix.encodedLength + Frame.headerLength] == RecordKind.header.rawValue, "\(label)")
                let notifiedFrames = try frames(in: Array(stream.dropFirst(StreamPrefix.encodedLength)))
                #expect(notifiedFrames.allSatisfy { $0.type == .plain }, "\(label)")
                let messages = try notifiedFrames.map(Self.message)
                let dataRecords = (payloadLength + RecordMessage.dataBytesPerRecord - 1) / RecordMessage.dataBytesPerRecord
                #expect(messages.count == dataRecords + 3, "\(label)")
                #expect(messages.first == .header(MessageHeader(message: 0, payloadLength: UInt64(payloadLength), digest: digest)), "\(label)")
                var sent: [UInt8] = []
                for case .data(let message, let offset, let bytes) in messages {
                    #expect(message == 0 && offset == UInt64(sent.count), "\(label)")
                    sent += bytes
                }
                #expect(sent == payload, "\(label)")
                #expect(Array(messages.suffix(2)) == [.end(message: 0, totalBytes: UInt64(payloadLength)), .close(reason: 0)], "\(label)")

                // Value shapes as in the secure mode: EOM last, sequence numbers from 0, no
                // value over the limit or of 3 bytes.
                #expect(transcript.notified.last == SequencedStream.endOfMessage, "\(label)")
                let streamValues = transcript.notified.dropLast()
                #expect(streamValues.allSatisfy { $0.count <= valueLength && $0.count >= 4 }, "\(label)")
                #expect(streamValues.enumerated().allSatisfy { index, value in
                    UInt16(value[0]) << 8 | UInt16(value[1]) == UInt16(truncatingIfNeeded: index)
                }, "\(label)")
                #expect(transcript.notified.count <= SecureSenderSession.estimatedValueCount(payloadLength: payloadLength, maximumValueLength: valueLength), "\(label)")

                // The central's writes: one plain ACK for message 0 with the full SHA-256.
                #expect(!transcript.written.contains { $0.count == 3 }, "\(label)")
                let writtenFrames = try frames(in: streamBytes(transcript.written))
                #expect(writtenFrames.map(\.type) == [.plain], "\(label)")
                #expect(try writtenFrames.map(Self.message) == [.ack(SecureAck(message: 0, digest: digest, outcome: .stored))], "\(label)")
            }
        }
    }

    @Test func thePlainSenderSendsEverythingWithoutWaitingForTheCentral() throws {
        var pair = try SessionPair(plainPayload: testPayload(9000), valueLength: 182, offered: [.resume])
        // No handshake pause: every value up to EOM is handed out before the central wrote anything.
        var values: [[UInt8]] = []
        while let value = pair.sender.nextValue() { values.append(value) }
        #expect(values.last == SequencedStream.endOfMessage)
        #expect(pair.sender.state == .awaitingAck)
        #expect(pair.sender.nextValue() == nil)
        var written: [[UInt8]] = []
        for value in values {
            for event in try pair.receiver.receiveNotification(value) {
                if case .write(let write) = event { written.append(write) }
                if case .complete = event { written += try pair.receiver.acknowledgement(outcome: 1) }
            }
        }
        var events: [SecureSenderSession.Event] = []
        for value in written { events += try pair.sender.receiveWrite(value) }
        #expect(events == [.acknowledged(alreadyStored: true)])
        #expect(pair.sender.state == .acknowledged)
    }

    @Test func thePrefixNeverChoosesSecureWhateverTheHelloOffered() throws {
        let metadata = try #require(FileMetadata(name: "a.txt", modificationSeconds: 1, modificationNanoseconds: 2))
        for raw in UInt32(0)..<16 {
            let offered = Capabilities(rawValue: raw)
            // A sender that would take everything: named, with more messages, resuming.
            var sender = try SecureSenderSession(
                plainAnswering: Self.hello(offered: offered), payload: [1], digest: Self.digest([1]), metadata: metadata,
                maximumValueLength: 182, wantsMulti: true)
            #expect(sender.chosen == offered.subtracting(.secure), "offered \(raw)")
            #expect(!sender.isSecure, "offered \(raw)")
            let firstValue = sender.nextValue()
            let first = try #require(firstValue)
            #expect(SecureReceiverSession.startsVersion2Stream(first))
            let prefix = try StreamPrefix(parsing: Array(first[2..<(2 + StreamPrefix.encodedLength)]), hello: Self.hello(offered: offered))
            #expect(prefix.chosen == offered.subtracting(.secure), "offered \(raw)")
            #expect(first[2 + StreamPrefix.encodedLength] == Frame.FrameType.plain.rawValue, "offered \(raw)")
            // Nothing: not even `resume` (this one does not take it) nor `meta` (no name, one message).
            let bare = try SecureSenderSession(
                plainAnswering: Self.hello(offered: offered), payload: [1], digest: Self.digest([1]), metadata: nil,
                maximumValueLength: 182, acceptsResume: false)
            #expect(bare.chosen == [], "offered \(raw)")
        }
        #expect(throws: SecureSessionError.self) {
            try SecureSenderSession(plainAnswering: Self.hello(offered: []), payload: [1], digest: [1, 2, 3],
                                    metadata: nil, maximumValueLength: 20)
        }
    }

    // MARK: - meta

    @Test(arguments: [20, 182])
    func aNamedMessageCarriesItsMetadataInTheHeader(valueLength: Int) throws {
        let metadata = try #require(FileMetadata(name: "plain report.pdf", modificationSeconds: 1_700_000_123, modificationNanoseconds: 456_789))
        let payload = testPayload(6000)
        var pair = try SessionPair(plainPayload: payload, valueLength: valueLength, metadata: metadata, offered: [.secure, .meta])
        #expect(pair.sender.chosen == [.meta])
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        let expected = MessageHeader(message: 0, payloadLength: 6000, digest: Self.digest(payload), metadata: metadata)
        #expect(transcript.receiverEvents.contains(.header(expected)))
        #expect(transcript.receiverEvents.contains(.complete(payload: payload, header: expected)))
        #expect(transcript.senderEvents == [.acknowledged(alreadyStored: false)])
        // Plain: the name travels in clear.
        let stream = streamBytes(transcript.notified)
        let name = Array(metadata.name.utf8)
        #expect((0...(stream.count - name.count)).contains { stream[$0..<($0 + name.count)].elementsEqual(name) })

        // Without the offer the name stays home.
        var unnamed = try SessionPair(plainPayload: payload, valueLength: valueLength, metadata: metadata, offered: [])
        #expect(unnamed.sender.chosen == [])
        let without = exchange(&unnamed)
        #expect(without.receiverEvents.contains(.header(MessageHeader(message: 0, payloadLength: 6000, digest: Self.digest(payload)))))
        #expect(without.completedPayload == payload)
    }

    // MARK: - multi

    @Test(arguments: valueLengths)
    func threeMessagesCrossInOnePlainSessionEachAcknowledgedInOrder(valueLength: Int) throws {
        let payloads = [testPayload(5000, seed: 11), [], testPayload(9001, seed: 12)]
        var pair = try SessionPair(plainPayload: payloads[0], valueLength: valueLength, offered: [.meta, .multi],
                                   wantsMulti: true)
        #expect(pair.sender.chosen == [.meta, .multi])
        let transcript = SecureMultiSessionTests.run(&pair, payloads: payloads, valueLength: valueLength)
        #expect(transcript.receiverError == nil)
        #expect(transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == payloads)
        #expect(transcript.completed.map(\.header.message) == [0, 1, 2])
        #expect(transcript.completed.map(\.header.digest) == payloads.map(Self.digest))
        #expect(transcript.senderEvents == Array(repeating: .acknowledged(alreadyStored: false), count: 3))
        #expect(pair.sender.acknowledgedCount == 3)
        #expect(pair.receiver.completedCount == 3)
        // One message at a time: each HEADER after the last message completed.
        let order = transcript.receiverEvents.compactMap { event -> String? in
            switch event {
            case .header(let header): "header \(header.message)"
            case .complete(_, let header): "complete \(header.message)"
            default: nil
            }
        }
        #expect(order == ["header 0", "complete 0", "header 1", "complete 1", "header 2", "complete 2"])
        #expect(!transcript.receiverEvents.contains { if case .senderAuthenticated = $0 { true } else { false } })
        // The sender's CLOSE 00 and EOM end the stream.
        #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
        #expect(pair.sender.endOfMessageSent)
        #expect(pair.sender.nextValue() == nil)
        #expect(!pair.receiver.isSecure)
    }

    @Test func thePlainStreamPausesForEachAck() throws {
        let payloads = SecureMultiSessionTests.payloads(2)
        var pair = try SessionPair(plainPayload: payloads[0], valueLength: 182, offered: [.multi], wantsMulti: true)
        var complete = false
        while let value = pair.sender.nextValue() {
            for event in try pair.receiver.receiveNotification(value) {
                if case .complete = event { complete = true }
            }
        }
        #expect(complete)
        #expect(pair.sender.state == .awaitingAck)
        #expect(!pair.sender.endOfMessageSent)
        #expect(throws: SecureSessionError.self) {
            try pair.sender.sendNext(payload: payloads[1], digest: Self.digest(payloads[1]), metadata: nil)
        }
        #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
        // The ACK releases it: the next message follows.
        var events: [SecureSenderSession.Event] = []
        for value in try pair.receiver.acknowledgement(outcome: 0) { events += try pair.sender.receiveWrite(value) }
        #expect(events == [.acknowledged(alreadyStored: false)])
        try pair.sender.sendNext(payload: payloads[1], digest: Self.digest(payloads[1]), metadata: nil)
        #expect(pair.sender.nextValue() != nil)
    }

    @Test func aPlainReceiverClosesAfterTheMessagesItTakes() throws {
        let payloads = SecureMultiSessionTests.payloads(4)
        var pair = try SessionPair(plainPayload: payloads[0], valueLength: 244, offered: [.multi], wantsMulti: true)
        let transcript = SecureMultiSessionTests.run(&pair, payloads: payloads, valueLength: 244, receiverTakes: 2)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == Array(payloads.prefix(2)))
        #expect(transcript.senderEvents.suffix(2) == [.acknowledged(alreadyStored: false), .closedByCentral(reason: 1)])
        #expect(pair.sender.state == .closedByCentral)
        #expect(pair.sender.nextValue() == nil)
    }

    // MARK: - resume

    /// Every call of a checkpoint lookup: which key, which HEADER.
    final class HeldPrefixCalls: Sendable {
        private let calls = Mutex<[(key: PeerKey?, header: MessageHeader)]>([])

        var recorded: [(key: PeerKey?, header: MessageHeader)] { calls.withLock { $0 } }

        func lookup(returning held: [UInt8]) -> SecureReceiverSession.HeldPrefix {
            { key, header in
                self.calls.withLock { $0.append((key, header)) }
                return held
            }
        }
    }

    @Test(arguments: [1, 4_096, 10_000, 39_999], [false, true])
    func aPlainMessageResumesFromTheHeldOffset(heldCount: Int, keyedCentral: Bool) throws {
        let payload = testPayload(40_000, seed: 21)
        let calls = HeldPrefixCalls()
        var pair = try SessionPair(
            plainPayload: payload, valueLength: 182, offered: [.resume],
            central: keyedCentral ? .keyed(acceptsPlain: true) : .keyless,
            heldPrefix: calls.lookup(returning: Array(payload[..<heldCount])))
        #expect(pair.sender.chosen == [.resume])
        let transcript = SecureResumeSessionTests.interleaved(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        // Asked once, for this message, with no key: nothing authenticates a plain sender.
        let recorded = calls.recorded
        #expect(recorded.count == 1)
        #expect(recorded.first?.key == nil)
        #expect(recorded.first?.header == MessageHeader(message: 0, payloadLength: 40_000, digest: Self.digest(payload)))
        #expect(transcript.completedPayload == payload)
        #expect(transcript.receiverEvents.contains(.resumed(offset: heldCount)))
        #expect(transcript.senderEvents == [.resumed(offset: UInt64(heldCount)), .acknowledged(alreadyStored: false)])
        #expect(pair.sender.resumedAt == UInt64(heldCount))
        // Only the bytes after the held ones are appended; the sender skipped ahead.
        #expect(transcript.appended.first?.offset == heldCount)
        #expect(transcript.appended.flatMap(\.bytes) == Array(payload[heldCount...]))
        #expect(pair.sender.payloadBytesNotified <= payload.count - heldCount + 2 * RecordMessage.dataBytesPerRecord)
        #expect(pair.sender.payloadBytesNotified >= payload.count - heldCount)
        // The central's writes: a plain RESUME, then the plain ACK.
        let written = try frames(in: streamBytes(transcript.written))
        #expect(written.allSatisfy { $0.type == .plain })
        #expect(try written.map(Self.message) == [
            .resume(message: 0, offset: UInt64(heldCount)),
            .ack(SecureAck(message: 0, digest: Self.digest(payload), outcome: .stored)),
        ])
    }

    @Test func aBadPlainCheckpointIsRefusedWithAck03() throws {
        let payload = testPayload(30_000, seed: 22)
        var held = Array(payload[..<12_000])
        held[7] ^= 0x01
        let calls = HeldPrefixCalls()
        var pair = try SessionPair(plainPayload: payload, valueLength: 182, offered: [.resume],
                                   heldPrefix: calls.lookup(returning: held))
        let transcript = SecureResumeSessionTests.interleaved(&pair)
        #expect(calls.recorded.map(\.key) == [nil])
        #expect(transcript.completedPayload == nil)
        let header = MessageHeader(message: 0, payloadLength: 30_000, digest: Self.digest(payload))
        #expect(transcript.receiverEvents.contains(.refusedDigestMismatch(header)))
        #expect(transcript.senderEvents == [.resumed(offset: 12_000), .refusedByCentral(outcome: 0x03)])
        #expect(!transcript.senderEvents.contains(.acknowledged(alreadyStored: false)))
        #expect(pair.sender.state == .failed)
        let written = try frames(in: streamBytes(transcript.written))
        #expect(try written.map(Self.message).last == .ack(SecureAck(message: 0, digest: header.digest, outcome: .refusedDigestMismatch)))
        #expect(throws: SecureSessionError.digestMismatch) { try pair.receiver.receiveNotification([0, 0x7F, 1, 2]) }
    }

    @Test func withoutResumeTheCheckpointIsNeverAsked() throws {
        let payload = testPayload(20_000, seed: 23)
        let calls = HeldPrefixCalls()
        var pair = try SessionPair(plainPayload: payload, valueLength: 182, offered: [.meta],
                                   heldPrefix: calls.lookup(returning: Array(payload[..<10_000])))
        #expect(!pair.sender.chosen.contains(.resume))
        let transcript = SecureResumeSessionTests.interleaved(&pair)
        #expect(calls.recorded.isEmpty)
        #expect(transcript.completedPayload == payload)
        #expect(transcript.appended.isEmpty)
        #expect(pair.sender.payloadBytesNotified == payload.count)
    }

    // MARK: - Downgrade

    @Test(arguments: [20, 182])
    func aKeyedCentralRefusesAPlainAnswerAndWritesNothing(valueLength: Int) throws {
        let payload = testPayload(5000)
        var pair = try SessionPair(plainPayload: payload, valueLength: valueLength, offered: [.secure, .meta],
                                   central: .keyed(acceptsPlain: false))
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .notSecure)
        #expect(transcript.written.isEmpty)
        #expect(transcript.receiverEvents.isEmpty)
        #expect(!transcript.sawHeader && !transcript.sawComplete)
        #expect(transcript.senderEvents.isEmpty)
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(pair.sender.state != .acknowledged)
        #expect(pair.receiver.remotePeer == nil)
        // The session stays over.
        #expect(throws: SecureSessionError.notSecure) { try pair.receiver.receiveNotification(SequencedStream.endOfMessage) }
        #expect(throws: SecureSessionError.self) { try pair.receiver.acknowledgement(outcome: 0) }
    }

    @Test(arguments: [20, 182])
    func aKeyedCentralThatAcceptsPlainCompletesInThePlainMode(valueLength: Int) throws {
        let payload = testPayload(5000)
        var pair = try SessionPair(plainPayload: payload, valueLength: valueLength, offered: [.secure, .meta],
                                   central: .keyed(acceptsPlain: true))
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completedPayload == payload)
        #expect(!transcript.receiverEvents.contains { if case .senderAuthenticated = $0 { true } else { false } })
        #expect(pair.receiver.remotePeer == nil)
        #expect(!pair.receiver.isSecure)
        #expect(transcript.senderEvents == [.acknowledged(alreadyStored: false)])
        #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
        #expect(try frames(in: streamBytes(transcript.written)).map(\.type) == [.plain])
    }

    @Test func acceptingPlainDoesNotDowngradeASecureSender() throws {
        let payload = testPayload(5000)
        var pair = try SessionPair(payload: payload, valueLength: 182)
        pair.receiver = SecureReceiverSession(
            identity: pair.central, authorizedPeers: authorized(pair.peripheral), hello: Self.hello(offered: [.secure]),
            maximumPayloadLength: 1 << 20, maximumWriteLength: 182, acceptsPlain: true)
        let transcript = exchange(&pair)
        #expect(transcript.completedPayload == payload)
        #expect(pair.receiver.isSecure)
        #expect(transcript.receiverEvents.contains(.senderAuthenticated(authorized(pair.peripheral).peers[0])))
        #expect(try frames(in: streamBytes(transcript.written)).allSatisfy { $0.type != .plain })
    }

    @Test func aKeylessCentralCannotBeTakenIntoTheSecureMode() throws {
        // A keyless central that (wrongly) offered `secure` meets a secure sender: it has no
        // keys to answer message 1 with, so it ends the session and writes nothing.
        var pair = try SessionPair(payload: testPayload(1000), valueLength: 182)
        pair.receiver = SecureReceiverSession(plainHello: Self.hello(offered: [.secure]), maximumPayloadLength: 1 << 20,
                                              maximumWriteLength: 182)
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .notSecure)
        #expect(transcript.written.isEmpty)
        #expect(pair.sender.state == .awaitingHandshake)

        // One that did not offer it refuses a prefix that chose it.
        var receiver = SecureReceiverSession(plainHello: Self.hello(offered: [.meta]), maximumPayloadLength: 100,
                                             maximumWriteLength: 182)
        let prefix = StreamPrefix(answering: Self.hello(offered: [.secure, .meta]), supports: [.secure, .meta])
        #expect(throws: SecureSessionError.protocolViolation(StreamPrefix.ParseError.notOffered(.secure).description)) {
            try receiver.receiveNotification([0, 0] + prefix.encoded)
        }
    }

    // MARK: - Hostile streams

    /// A frame a plain stream must not carry, and how the receiving side refuses it.
    struct Intruder: Sendable, CustomTestStringConvertible {
        let testDescription: String
        let frame: [UInt8]
        let error: SecureSessionError

        static func sealed() throws -> Intruder {
            var (initiator, _) = try handshakePair()
            return Intruder(
                testDescription: "sealed (02)",
                frame: try initiator.sealer.seal(Record(kind: .data, content: [0, 0, 0, 0] + [UInt8](repeating: 0, count: 8) + [1, 2, 3])),
                error: .recordFailed(RecordError.notPlain.description))
        }

        static let handshake = Intruder(
            testDescription: "handshake (01)", frame: Frame(type: .handshake, body: [UInt8](repeating: 0x42, count: 48)).encoded,
            error: .protocolViolation("handshake frame after the handshake"))
    }

    static func intruders() throws -> [Intruder] { [try Intruder.sealed(), Intruder.handshake] }

    /// Feeds `values` to `receiver`, acknowledging a completed message; stops at the first error.
    static func feed(_ values: [[UInt8]], to receiver: inout SecureReceiverSession) -> Transcript {
        var transcript = Transcript()
        transcript.notified = values
        do throws(SecureSessionError) {
            for value in values {
                let events = try receiver.receiveNotification(value)
                transcript.receiverEvents += events
                for event in events {
                    if case .write(let write) = event { transcript.written.append(write) }
                    if case .complete = event { transcript.written += try receiver.acknowledgement(outcome: 0) }
                }
            }
        } catch {
            transcript.receiverError = error
        }
        return transcript
    }

    @Test(arguments: [20, 182])
    func aSealedOrHandshakeFrameInAPlainStreamEndsTheReceiverSession(valueLength: Int) throws {
        let payload = testPayload(10_000, seed: 31)
        var reference = try SessionPair(plainPayload: payload, valueLength: valueLength)
        let stream = streamBytes(exchange(&reference).notified)
        let prefix = Array(stream.prefix(StreamPrefix.encodedLength))
        let genuine = try frames(in: Array(stream.dropFirst(StreamPrefix.encodedLength)))
        // HEADER, DATA × 3, END, CLOSE.
        #expect(genuine.count == 6)
        for intruder in try Self.intruders() {
            // Before the HEADER, after it, between DATA records, before END.
            for position in [0, 1, 2, 4] {
                var bytes = prefix
                for (index, frame) in genuine.enumerated() {
                    if index == position { bytes += intruder.frame }
                    bytes += frame.encoded
                }
                var pair = try SessionPair(plainPayload: payload, valueLength: valueLength)
                let transcript = Self.feed(sequencedValues(bytes, valueLength: valueLength), to: &pair.receiver)
                let label = "\(intruder.testDescription) at frame \(position)"
                #expect(transcript.receiverError == intruder.error, "\(label)")
                #expect(!transcript.sawComplete, "\(label)")
                #expect(transcript.written.isEmpty, "\(label)")
                #expect(!transcript.sawEndOfStream, "\(label)")
                #expect(pair.receiver.completedCount == 0, "\(label)")
                #expect(throws: intruder.error) { try pair.receiver.receiveNotification(SequencedStream.endOfMessage) }
            }
            // After END: the stream fails all the same. The message completed and was
            // acknowledged only when END came in an earlier value than the intruder (a call
            // that throws returns no events, `.complete` included).
            var bytes = prefix
            for (index, frame) in genuine.enumerated() {
                if index == genuine.count - 1 { bytes += intruder.frame }
                bytes += frame.encoded
            }
            var pair = try SessionPair(plainPayload: payload, valueLength: valueLength)
            let transcript = Self.feed(sequencedValues(bytes, valueLength: valueLength), to: &pair.receiver)
            #expect(transcript.completedPayload.map { $0 == payload } != false)
            #expect(transcript.sawComplete == !transcript.written.isEmpty)
            #expect(transcript.receiverError == intruder.error)
            #expect(!transcript.sawEndOfStream)
            #expect(!transcript.receiverEvents.contains(.closed(reason: 0)))
        }
    }

    @Test func aSealedOrHandshakeFrameInThePlainWritesEndsTheSenderSession() throws {
        let payload = testPayload(3000, seed: 32)
        for intruder in try Self.intruders() {
            var pair = try SessionPair(plainPayload: payload, valueLength: 182)
            let forged = Array(sequencedValues(intruder.frame, valueLength: 182).dropLast())
            var genuineAck: [[UInt8]] = []
            let transcript = exchange(&pair, ackWrites: { receiver, outcome throws(SecureSessionError) in
                genuineAck = try receiver.acknowledgement(outcome: outcome)
                return forged
            })
            #expect(transcript.sawComplete, "\(intruder.testDescription)")
            #expect(transcript.senderError == intruder.error, "\(intruder.testDescription)")
            #expect(transcript.senderEvents.isEmpty, "\(intruder.testDescription)")
            #expect(pair.sender.state == .failed, "\(intruder.testDescription)")
            #expect(pair.sender.acknowledgedCount == 0, "\(intruder.testDescription)")
            // The genuine ACK (numbered after the forged values) comes too late.
            let renumbered = genuineAck.enumerated().map { index, value in
                let sequence = UInt16(forged.count + index)
                return [UInt8(sequence >> 8), UInt8(truncatingIfNeeded: sequence)] + value.dropFirst(2)
            }
            #expect(throws: intruder.error) { for value in renumbered { _ = try pair.sender.receiveWrite(value) } }
        }
    }

    /// Where the byte at `offset` of the stream sits among `values`: which value, which index in it.
    static func locate(_ offset: Int, in values: [[UInt8]]) -> (value: Int, index: Int)? {
        var start = 0
        for (number, value) in values.enumerated() where value != SequencedStream.endOfMessage {
            let length = value.count - SequencedStream.sequenceLength
            if offset < start + length { return (number, SequencedStream.sequenceLength + offset - start) }
            start += length
        }
        return nil
    }

    /// The stream offset of payload byte `byte` in a plain single-message stream without metadata.
    static func streamOffset(ofPayloadByte byte: Int) -> Int {
        let headerFrame = Frame.headerLength + 1 + 4 + 8 + 32 + 2
        let dataFrameOverhead = Frame.headerLength + 1 + 4 + 8
        let record = byte / RecordMessage.dataBytesPerRecord
        return StreamPrefix.encodedLength + headerFrame + record * (dataFrameOverhead + RecordMessage.dataBytesPerRecord)
            + dataFrameOverhead + byte % RecordMessage.dataBytesPerRecord
    }

    @Test(arguments: [0, 4095, 4096, 9999], [20, 182])
    func aTamperedDataByteMakesEndFail(byte: Int, valueLength: Int) throws {
        let payload = testPayload(10_000, seed: 33)
        var reference = try SessionPair(plainPayload: payload, valueLength: valueLength)
        let notified = exchange(&reference).notified
        let target = try #require(Self.locate(Self.streamOffset(ofPayloadByte: byte), in: notified))
        // Plain: the payload byte sits in clear where the layout says.
        #expect(notified[target.value][target.index] == payload[byte])

        var pair = try SessionPair(plainPayload: payload, valueLength: valueLength)
        let transcript = exchange(&pair, tamper: { index, value in
            guard index == target.value else { return value }
            var tampered = value
            tampered[target.index] ^= 0x80
            return tampered
        })
        #expect(transcript.receiverError == .digestMismatch)
        #expect(!transcript.sawComplete)
        #expect(pair.receiver.completedCount == 0)
        #expect(transcript.written.isEmpty)
        #expect(transcript.senderEvents.isEmpty)
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(pair.sender.state == .awaitingAck)
        // The plain records opened (DATA arrived); only END's SHA-256 caught it. (The last
        // progress event may be lost with the value that carried END: a call that throws
        // returns no events.)
        #expect(transcript.sawHeader)
        #expect(transcript.receiverEvents.contains { if case .progress = $0 { true } else { false } })
        #expect(throws: SecureSessionError.digestMismatch) { try pair.receiver.acknowledgement(outcome: 0) }
    }

    @Test func plainModeCatchesCorruptionButNotForgeryAndTheSenderStillRefusesTheAck() throws {
        // An attacker who rewrites a DATA byte and the HEADER's SHA-256 to match gets a forged
        // message stored by a plain receiver (nothing authenticates it); the sender, whose own
        // digest the ACK does not name, does not count it delivered.
        let payload = testPayload(5000, seed: 34)
        var forged = payload
        forged[100] ^= 0xFF
        var reference = try SessionPair(plainPayload: payload, valueLength: 182)
        var stream = streamBytes(exchange(&reference).notified)
        let digestOffset = StreamPrefix.encodedLength + Frame.headerLength + 1 + 4 + 8
        #expect(Array(stream[digestOffset..<(digestOffset + 32)]) == Self.digest(payload))
        stream.replaceSubrange(digestOffset..<(digestOffset + 32), with: Self.digest(forged))
        stream[Self.streamOffset(ofPayloadByte: 100)] ^= 0xFF

        var pair = try SessionPair(plainPayload: payload, valueLength: 182)
        let transcript = Self.feed(sequencedValues(stream, valueLength: 182), to: &pair.receiver)
        #expect(transcript.receiverError == nil)
        #expect(transcript.completedPayload == forged)
        var senderError: SecureSessionError?
        while pair.sender.nextValue() != nil {}
        do {
            for value in transcript.written { _ = try pair.sender.receiveWrite(value) }
        } catch {
            senderError = error
        }
        #expect(senderError == .protocolViolation("ACK names another SHA-256"))
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(pair.sender.state == .failed)
    }

    @Test func aPlainHeaderOverTheLimitIsRefusedBeforeAnyData() throws {
        var pair = try SessionPair(plainPayload: testPayload(1000), valueLength: 244, maximumPayloadLength: 999)
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .tooLarge(announced: 1000, limit: 999))
        #expect(!transcript.sawHeader)
        #expect(!transcript.receiverEvents.contains { if case .progress = $0 { true } else { false } })
        #expect(transcript.written.isEmpty)
    }
}
