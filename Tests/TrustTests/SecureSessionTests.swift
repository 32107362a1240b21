import TestSupport
import Crypto
import Foundation
import Transfer
import Testing

@testable import Trust

@Suite struct SecureSessionTests {
    static let payloadLengths = [0, 1, 4095, 4096, 4097, 100_000]
    static let valueLengths = [20, 182, 244, 509]

    @Test(arguments: payloadLengths, valueLengths)
    func aMessageCrossesInOrderAndShuffled(payloadLength: Int, valueLength: Int) throws {
        for seed in [nil, UInt64(payloadLength * 1000 + valueLength)] as [UInt64?] {
            let payload = testPayload(payloadLength, seed: UInt64(payloadLength))
            var pair = try SessionPair(payload: payload, valueLength: valueLength)
            let transcript = exchange(&pair, shuffle: seed)
            #expect(transcript.receiverError == nil)
            #expect(transcript.senderError == nil)
            #expect(transcript.completedPayload == payload)
            let header = transcript.receiverEvents.compactMap { event -> MessageHeader? in
                if case .header(let header) = event { header } else { nil }
            }
            #expect(header == [MessageHeader(message: 0, payloadLength: UInt64(payloadLength), digest: Array(SHA256.hash(data: payload)))])
            #expect(transcript.receiverEvents.first == .write(transcript.written[0]))
            #expect(transcript.receiverEvents.contains(.senderAuthenticated(authorized(pair.peripheral).peers[0])))
            #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
            #expect(transcript.senderEvents == [.centralAuthenticated(authorized(pair.central).peers[0]), .acknowledged(alreadyStored: false)])
            #expect(pair.sender.state == .acknowledged)
            #expect(pair.sender.payloadBytesSent == payloadLength)
            #expect(pair.sender.endOfMessageSent)
            #expect(pair.sender.remotePeer?.key == pair.central.publicKey)
            #expect(pair.receiver.remotePeer?.key == pair.peripheral.publicKey)

            // Value shapes: EOM last and only there, nothing 3 bytes long, nothing over the
            // limit, short values only at the two pauses (at most two each) and the end.
            #expect(transcript.notified.last == SequencedStream.endOfMessage)
            let streamValues = transcript.notified.dropLast()
            #expect(!streamValues.contains { $0.count == 3 || $0 == SequencedStream.endOfMessage })
            #expect(!transcript.written.contains { $0.count == 3 })
            #expect(streamValues.allSatisfy { $0.count <= valueLength && $0.count >= 4 })
            #expect(streamValues.filter { $0.count < valueLength }.count <= 4)
            #expect(
                transcript.notified.count
                    <= SecureSenderSession.estimatedValueCount(payloadLength: payloadLength, maximumValueLength: valueLength))
            // Sequence numbers from 0, one per value, wrapping.
            #expect(streamValues.enumerated().allSatisfy { index, value in
                UInt16(value[0]) << 8 | UInt16(value[1]) == UInt16(truncatingIfNeeded: index)
            })
        }
    }

    @Test func sequenceNumbersWrapOnALongStream() throws {
        // 3 MB at 20-byte values: over 65 536 values.
        let payload = testPayload(1_300_000)
        var pair = try SessionPair(payload: payload, valueLength: 20)
        let transcript = exchange(&pair, shuffle: 7)
        #expect(transcript.notified.count > 65536)
        #expect(transcript.completedPayload == payload)
        #expect(pair.sender.state == .acknowledged)
    }

    @Test func theFirstValueIsRecognisedAsAVersion2Stream() throws {
        var pair = try SessionPair(payload: [1, 2, 3], valueLength: 20)
        let firstValue = pair.sender.nextValue()
        let first = try #require(firstValue)
        #expect(first.count == 20)
        #expect(SecureReceiverSession.startsVersion2Stream(first))
        // A version-1 framed header: same magic, version 1.
        var versionOne = first
        versionOne[10] = 1
        #expect(!SecureReceiverSession.startsVersion2Stream(versionOne))
        #expect(!SecureReceiverSession.startsVersion2Stream(SequencedStream.endOfMessage))
        #expect(!SecureReceiverSession.startsVersion2Stream([0, 1] + first.dropFirst(2)))
    }

    @Test func metadataTravelsOnlyWhenMetaWasOffered() throws {
        let metadata = try #require(FileMetadata(name: "report.pdf", modificationSeconds: 1_700_000_000, modificationNanoseconds: 5))
        var withMeta = try SessionPair(payload: [9, 9], valueLength: 182, metadata: metadata, offered: [.secure, .meta, .multi])
        #expect(withMeta.sender.chosen == [.secure, .meta])
        let received = exchange(&withMeta)
        #expect(received.receiverEvents.contains { if case .complete(let header) = $0 { header.metadata == metadata } else { false } })

        // `resume` is chosen whenever offered (without a checkpoint it costs nothing); `meta` not.
        var withoutMeta = try SessionPair(payload: [9, 9], valueLength: 182, metadata: metadata, offered: [.secure, .resume])
        #expect(withoutMeta.sender.chosen == [.secure, .resume])
        let plain = exchange(&withoutMeta)
        #expect(plain.receiverEvents.contains { if case .complete(let header) = $0 { header.metadata == nil } else { false } })
    }

    @Test func anUnauthorizedCentralGetsNothingAfterMessage1() throws {
        let stranger = HostIdentity()
        let payload = testPayload(10_000)
        var pair = try SessionPair(
            payload: payload, valueLength: 20, central: stranger, senderPeers: authorized(HostIdentity()))
        let transcript = exchange(&pair)
        #expect(transcript.senderError == .unauthorizedPeer(stranger.publicKey))
        #expect(pair.sender.state == .failed)
        #expect(pair.sender.nextValue() == nil)
        let streamBytes = transcript.notified.reduce(0) { $0 + $1.count - 2 }
        #expect(streamBytes == StreamPrefix.encodedLength + Frame.headerLength + 32)
        #expect(!transcript.sawHeader)
        #expect(throws: SecureSessionError.unauthorizedPeer(stranger.publicKey)) { try pair.sender.receiveWrite([0, 9, 1, 2]) }
    }

    @Test func anUnauthorizedPeripheralIsRefusedAtMessage3() throws {
        let stranger = HostIdentity()
        var pair = try SessionPair(
            payload: testPayload(10_000), valueLength: 182, peripheral: stranger,
            receiverPeers: authorized(HostIdentity()))
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .unauthorizedPeer(stranger.publicKey))
        #expect(!transcript.sawHeader)
        #expect(!transcript.receiverEvents.contains { if case .senderAuthenticated = $0 { true } else { false } })
        #expect(pair.receiver.remotePeer == nil)
    }

    @Test func aHelloWithoutSecureIsRefusedBySender() {
        let hello = HelloV2(session: 1, offered: [.meta, .multi])
        #expect(throws: SecureSessionError.notSecure) {
            try SecureSenderSession(
                identity: HostIdentity(), authorizedPeers: authorized(HostIdentity()), hello: hello,
                payload: [], digest: Array(SHA256.hash(data: [UInt8]())), metadata: nil, maximumValueLength: 20)
        }
    }

    @Test func aPrefixWithoutSecureIsADowngrade() {
        let hello = HelloV2(session: 42, offered: [.secure, .meta])
        var receiver = SecureReceiverSession(
            identity: HostIdentity(), authorizedPeers: authorized(HostIdentity()), hello: hello,
            maximumPayloadLength: 100, maximumWriteLength: 182)
        let prefix = StreamPrefix(answering: hello, supports: [.meta])
        let value = [0, 0] + prefix.encoded + [0x03, 0, 2, 6, 0]
        #expect(SecureReceiverSession.startsVersion2Stream(value))
        #expect(throws: SecureSessionError.notSecure) { try receiver.receiveNotification(value) }
        #expect(throws: SecureSessionError.notSecure) { try receiver.receiveNotification(SequencedStream.endOfMessage) }
    }

    @Test func aPrefixForAnotherSessionIsRefused() {
        let hello = HelloV2(session: 42, offered: [.secure])
        var receiver = SecureReceiverSession(
            identity: HostIdentity(), authorizedPeers: authorized(HostIdentity()), hello: hello,
            maximumPayloadLength: 100, maximumWriteLength: 182)
        let prefix = StreamPrefix(answering: HelloV2(session: 43, offered: [.secure]), supports: [.secure])
        #expect(throws: SecureSessionError.protocolViolation("stream for another session")) {
            try receiver.receiveNotification([0, 0] + prefix.encoded)
        }
    }

    @Test func aFlippedBitInAnyValueNeverCompletes() throws {
        let payload = testPayload(5000)
        var generator = SeededGenerator(seed: 99)
        var reference = try SessionPair(payload: payload, valueLength: 20)
        let streamValues = exchange(&reference).notified.dropLast()
        // The sealed CLOSE (21 bytes) ends the stream; the message is complete before it.
        let closeStart = streamValues.reduce(0) { $0 + $1.count - 2 } - (Frame.headerLength + 1 + 1 + 16)
        var valueStart = 0
        for (index, reference) in streamValues.enumerated() {
            defer { valueStart += reference.count - 2 }
            for _ in 0..<3 {
                let bit = Int.random(in: 16..<(reference.count * 8), using: &generator)
                var pair = try SessionPair(payload: payload, valueLength: 20)
                let transcript = exchange(&pair, tamper: { at, value in
                    guard at == index else { return value }
                    var tampered = value
                    tampered[bit / 8] ^= 1 << (bit % 8)
                    return tampered
                })
                let completed = transcript.sawComplete
                let failed = transcript.failed
                let ended = transcript.sawEndOfStream
                let acknowledged = transcript.senderEvents.contains(.acknowledged(alreadyStored: false))
                if valueStart + bit / 8 - 2 < closeStart {
                    #expect(!completed, "value \(index) bit \(bit)")
                    #expect(!acknowledged, "value \(index) bit \(bit)")
                    // Either side refused it, or (a frame length grew) the stream never ended.
                    #expect(failed || !ended, "value \(index) bit \(bit)")
                } else {
                    #expect(failed, "value \(index) bit \(bit) (in CLOSE)")
                    #expect(!ended, "value \(index) bit \(bit) (in CLOSE)")
                }
            }
        }
    }

    @Test func aReplayedNotificationEndsTheSession() throws {
        for duplicate in [0, 2, 40] {
            var pair = try SessionPair(payload: testPayload(8000), valueLength: 182)
            let transcript = exchange(&pair, duplicate: duplicate)
            guard case .streamFailed = transcript.receiverError else {
                Issue.record("value \(duplicate) replayed: \(String(describing: transcript.receiverError))")
                continue
            }
            #expect(!transcript.sawComplete)
        }
    }

    @Test func aReplayedWriteEndsTheSession() throws {
        var pair = try SessionPair(payload: testPayload(300), valueLength: 20)
        var message2: [[UInt8]] = []
        while let value = pair.sender.nextValue() {
            for case .write(let write) in try pair.receive(value) { message2.append(write) }
        }
        #expect(message2.count == 6)  // 99 bytes in 18-byte pieces: 5 full, one of 9.
        for value in message2.dropLast() { #expect(try pair.sender.receiveWrite(value).isEmpty) }
        #expect(throws: SecureSessionError.streamFailed("value 0 received twice")) { try pair.sender.receiveWrite(message2[0]) }
        #expect(pair.sender.nextValue() == nil)
    }

    @Test func anAckFromAnotherSessionIsRefused() throws {
        let payload = testPayload(3000)
        let peripheral = HostIdentity()
        let central = HostIdentity()
        var first = try SessionPair(payload: payload, valueLength: 182, peripheral: peripheral, central: central)
        var second = try SessionPair(payload: payload, valueLength: 182, peripheral: peripheral, central: central)
        // The second session's ACK (same identities, same message, other session keys) goes to
        // the first sender in place of its own.
        _ = exchange(&second, ackWrites: { _, _ in [] })
        let foreignAck = try second.receiver.acknowledgement(outcome: 0)
        let transcript = exchange(&first, ackWrites: { _, _ in foreignAck })
        #expect(transcript.sawComplete)
        guard case .recordFailed = transcript.senderError else {
            Issue.record("foreign ACK accepted: \(String(describing: transcript.senderError))")
            return
        }
        #expect(first.sender.state == .failed)
        #expect(!transcript.senderEvents.contains(.acknowledged(alreadyStored: false)))
    }

    @Test func aTooLargeMessageIsRefusedBeforeAnyData() throws {
        var pair = try SessionPair(payload: testPayload(1000), valueLength: 244, maximumPayloadLength: 999)
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .tooLarge(announced: 1000, limit: 999))
        #expect(!transcript.sawHeader)
        #expect(!transcript.receiverEvents.contains { if case .progress = $0 { true } else { false } })
    }

    @Test(arguments: [(UInt8(1), SecureSenderSession.Event.acknowledged(alreadyStored: true)), (2, .refusedByCentral(outcome: 2))])
    func theAckOutcomeReachesTheSender(outcome: UInt8, expected: SecureSenderSession.Event) throws {
        var pair = try SessionPair(payload: testPayload(5000), valueLength: 244)
        let transcript = exchange(&pair, ackOutcome: outcome)
        #expect(transcript.senderEvents.last == expected)
        #expect(pair.sender.state == (outcome == 2 ? .failed : .acknowledged))
    }

    @Test func aWriteAfterTheAckIsRefusedButTheMessageStaysAcknowledged() throws {
        var pair = try SessionPair(payload: testPayload(100), valueLength: 20)
        let transcript = exchange(&pair)
        #expect(pair.sender.state == .acknowledged)
        let sequence = UInt16(transcript.written.count)
        #expect(throws: SecureSessionError.protocolViolation("write after the message was acknowledged")) {
            try pair.sender.receiveWrite([UInt8(sequence >> 8), UInt8(truncatingIfNeeded: sequence), 0x02, 0x00, 0x01, 0x00])
        }
        #expect(pair.sender.state == .acknowledged)
        #expect(pair.sender.nextValue() == nil)
    }

    @Test func acknowledgementIsRefusedOutOfPlace() throws {
        var pair = try SessionPair(payload: testPayload(10), valueLength: 20)
        #expect(throws: SecureSessionError.self) { try pair.receiver.acknowledgement(outcome: 0) }
        _ = exchange(&pair)
        #expect(throws: SecureSessionError.self) { try pair.receiver.acknowledgement(outcome: 0) }  // twice
        var other = try SessionPair(payload: testPayload(10), valueLength: 20)
        _ = exchange(&other, ackWrites: { _, _ in [] })
        #expect(throws: SecureSessionError.self) { try other.receiver.acknowledgement(outcome: 3) }
        #expect(throws: SecureSessionError.self) { try other.receiver.acknowledgement(outcome: 9) }
    }

    @Test func valuesAfterTheEndOfTheStreamAreRefused() throws {
        var pair = try SessionPair(payload: testPayload(10), valueLength: 20)
        let transcript = exchange(&pair)
        #expect(transcript.sawEndOfStream)
        #expect(throws: SecureSessionError.self) { try pair.receive(SequencedStream.endOfMessage) }
    }

    @Test func aValueTooFarAheadIsRefused() throws {
        var reader = SequencedStreamReader()
        #expect(try reader.accept([0, 255, 7, 7]).isEmpty)  // 255 ahead: held
        #expect(throws: SecureSessionError.streamFailed("value 256 too far ahead of 0")) { try reader.accept([1, 0, 7, 7]) }
        #expect(throws: SecureSessionError.self) { try reader.accept([0, 0] + [UInt8](repeating: 1, count: 511)) }  // 513 bytes
        var tooShort = SequencedStreamReader()
        #expect(throws: SecureSessionError.self) { try tooShort.accept([0, 0]) }
    }

    @Test func theWriterNeverCutsAOneBytePiece() {
        var generator = SeededGenerator(seed: 5)
        for valueLength in 20...40 {
            var writer = SequencedStreamWriter(maximumValueLength: valueLength)
            var sent: [UInt8] = []
            var received: [UInt8] = []
            for _ in 0..<200 {
                let segment = (0..<Int.random(in: 3...120, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
                sent += segment
                writer.append(segment)
                if Bool.random(using: &generator) { writer.flush() }
                while let value = writer.nextValue() {
                    #expect(value.count >= 4 && value.count <= valueLength)
                    received += value.dropFirst(2)
                }
            }
            writer.flush()
            for value in writer.drain() {
                #expect(value.count >= 4 && value.count <= valueLength)
                received += value.dropFirst(2)
            }
            #expect(received == sent)
        }
    }

    @Test func sealingAndReceivingOneMebibyte() throws {
        let payload = testPayload(1 << 20)
        let clock = ContinuousClock()
        var transcript = Transcript()
        var pair = try SessionPair(payload: payload, valueLength: 509)
        let elapsed = clock.measure { transcript = exchange(&pair) }
        #expect(transcript.completedPayload == payload)
        let seconds = elapsed.seconds
        print(
            "secure session, 1 MiB at 509-byte values (handshake, seal, frame, cut, reorder, open, SHA-256): "
                + String(format: "%.1f ms, %.1f MB/s, %d values", seconds * 1000, Double(payload.count) / seconds / 1e6, transcript.notified.count))
    }
}
