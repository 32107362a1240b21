import Transfer
import Crypto
import TestSupport
import Testing

@testable import Trust

/// Sessions that carry several messages (`multi`, docs/wire-v2.md section 4): stop-and-wait,
/// one ACK per message in order, CLOSE from either side.
@Suite struct SecureMultiSessionTests {
    /// What a multi exchange produced.
    struct MultiTranscript {
        var completed: [(header: MessageHeader, payload: [UInt8])] = []
        var acknowledged = 0
        var receiverEvents: [SecureReceiverSession.Event] = []
        var senderEvents: [SecureSenderSession.Event] = []
        var receiverError: SecureSessionError?
        var senderError: SecureSessionError?
        /// The receiver's CLOSE values, when it closed.
        var closedByReceiver = false
    }

    /// Runs one session: the sender offers `payloads` in turn (the first given to the pair),
    /// the receiver acknowledges each as it completes; `receiverTakes`: after that many
    /// messages the receiver writes CLOSE `01`; `cutAfterAcks`: the link is cut (the exchange
    /// stops) once that many ACKs reached the sender.
    static func run(_ pair: inout SessionPair, payloads: [[UInt8]], valueLength: Int, receiverTakes: Int? = nil,
                    cutAfterAcks: Int? = nil, maximumRounds: Int = 10_000) -> MultiTranscript {
        var transcript = MultiTranscript()
        var nextPayload = 1
        for _ in 0..<maximumRounds {
            var writes: [[UInt8]] = []
            var notified = 0
            do throws(SecureSessionError) {
                while let value = pair.sender.nextValue() {
                    notified += 1
                    let events = try pair.receive(value)
                    transcript.receiverEvents += events
                    for event in events {
                        switch event {
                        case .write(let value): writes.append(value)
                        case .complete:
                            transcript.completed.append((pair.kept.completed.last!.header, pair.kept.completed.last!.bytes))
                            // The last message it takes: CLOSE 01 with the ACK, as the central does.
                            let closing = transcript.completed.count == receiverTakes
                            writes += try pair.receiver.acknowledgement(outcome: 0, closingWith: closing ? 1 : nil)
                            transcript.closedByReceiver = closing
                        default: break
                        }
                    }
                }
            } catch {
                transcript.receiverError = error
                return transcript
            }
            if notified == 0 && writes.isEmpty { break }
            do throws(SecureSessionError) {
                for value in writes {
                    for event in try pair.sender.receiveWrite(value) {
                        transcript.senderEvents.append(event)
                        guard case .acknowledged = event else { continue }
                        transcript.acknowledged += 1
                        if let cutAfterAcks, transcript.acknowledged == cutAfterAcks { return transcript }
                        // The receiver's CLOSE came with this ACK: nothing more to send.
                        if pair.sender.state == .closedByCentral { continue }
                        if nextPayload < payloads.count {
                            let payload = payloads[nextPayload]
                            nextPayload += 1
                            try pair.sender.sendNext(payload: payload, digest: Array(SHA256.hash(data: payload)), metadata: nil)
                        } else {
                            try pair.sender.finish()
                        }
                    }
                }
            } catch {
                transcript.senderError = error
                return transcript
            }
        }
        return transcript
    }

    static func payloads(_ count: Int, length: Int = 700) -> [[UInt8]] {
        (0..<count).map { testPayload(length + $0 * 37, seed: UInt64($0 + 1)) }
    }

    @Test(arguments: [20, 182, 509])
    func severalMessagesCrossInOneSessionWithOneAckEach(valueLength: Int) throws {
        let payloads = Self.payloads(5)
        var pair = try SessionPair(payload: payloads[0], valueLength: valueLength, offered: [.secure, .meta, .multi],
                                   wantsMulti: true)
        #expect(pair.sender.chosen.contains(.multi))
        let transcript = Self.run(&pair, payloads: payloads, valueLength: valueLength)
        #expect(transcript.receiverError == nil)
        #expect(transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == payloads)
        #expect(transcript.completed.map(\.header.message) == [0, 1, 2, 3, 4])
        #expect(transcript.acknowledged == 5)
        #expect(pair.sender.acknowledgedCount == 5)
        #expect(pair.receiver.completedCount == 5)
        // ACKs arrive in message order, each after its message: one per message, then the
        // sender's CLOSE 00 and EOM end the stream.
        #expect(transcript.senderEvents.filter { $0 == .acknowledged(alreadyStored: false) }.count == 5)
        #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
        #expect(pair.sender.endOfMessageSent)
    }

    @Test func withoutTheOfferTheSessionCarriesOneMessage() throws {
        let payloads = Self.payloads(2)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .meta], wantsMulti: true)
        #expect(!pair.sender.chosen.contains(.multi))
        let transcript = exchange(&pair)
        #expect(transcript.completedPayload == payloads[0])
        #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
        #expect(throws: SecureSessionError.self) {
            try pair.sender.sendNext(payload: payloads[1], digest: Array(SHA256.hash(data: payloads[1])), metadata: nil)
        }
    }

    @Test func aSenderThatDoesNotWantMoreDoesNotChooseMulti() throws {
        let pair = try SessionPair(payload: testPayload(10), valueLength: 182, offered: [.secure, .multi])
        #expect(!pair.sender.chosen.contains(.multi))
    }

    @Test func theStreamPausesForEachAckSoOneMessageAtMostIsUnacknowledged() throws {
        let payloads = Self.payloads(3)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .multi], wantsMulti: true)
        // Run the handshake and the first message without acknowledging it.
        var written: [[UInt8]] = []
        var complete = false
        for _ in 0..<10 {
            while let value = pair.sender.nextValue() {
                for event in try pair.receive(value) {
                    if case .write(let write) = event { written.append(write) }
                    if case .complete = event { complete = true }
                }
            }
            for value in written { _ = try pair.sender.receiveWrite(value) }
            written = []
        }
        #expect(complete)
        // No ACK: the sender sends nothing more (no next HEADER, no EOM) and accepts no next message.
        #expect(pair.sender.state == .awaitingAck)
        #expect(pair.sender.nextValue() == nil)
        #expect(!pair.sender.endOfMessageSent)
        #expect(throws: SecureSessionError.self) {
            try pair.sender.sendNext(payload: payloads[1], digest: Array(SHA256.hash(data: payloads[1])), metadata: nil)
        }
        #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
    }

    @Test func aReceiverRefusesTheNextHeaderBeforeItAcknowledged() throws {
        // A receiver that has not acknowledged message 0 is fed the sender's message 1 (the
        // sender got its ACK from a copy of the receiver: sessions are values). A sender that
        // does not wait cannot make it hold more than one message.
        let payloads = Self.payloads(2)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .multi], wantsMulti: true)
        var notYetAcknowledging: SecureReceiverSession?
        var failure: SecureSessionError?
        rounds: for _ in 0..<10 {
            var written: [[UInt8]] = []
            while let value = pair.sender.nextValue() {
                if var slow = notYetAcknowledging {
                    do { _ = try slow.receiveNotification(value) } catch {
                        failure = error
                        break rounds
                    }
                    notYetAcknowledging = slow
                    continue
                }
                for event in try pair.receive(value) {
                    if case .write(let write) = event { written.append(write) }
                    if case .complete = event {
                        notYetAcknowledging = pair.receiver
                        written += try pair.receiver.acknowledgement(outcome: 0)
                    }
                }
            }
            for value in written {
                for event in try pair.sender.receiveWrite(value) where event == .acknowledged(alreadyStored: false) {
                    try pair.sender.sendNext(payload: payloads[1], digest: Array(SHA256.hash(data: payloads[1])), metadata: nil)
                }
            }
        }
        #expect(failure == .protocolViolation("HEADER of message 1 before message 0 was acknowledged"))
    }

    @Test func theReceiverClosesAfterTheMessagesItTakes() throws {
        let payloads = Self.payloads(5)
        var pair = try SessionPair(payload: payloads[0], valueLength: 244, offered: [.secure, .multi], wantsMulti: true)
        let transcript = Self.run(&pair, payloads: payloads, valueLength: 244, receiverTakes: 3)
        #expect(transcript.receiverError == nil)
        #expect(transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == Array(payloads.prefix(3)))
        #expect(transcript.acknowledged == 3)
        #expect(transcript.senderEvents.last == .closedByCentral(reason: 1))
        #expect(pair.sender.state == .closedByCentral)
        #expect(pair.sender.nextValue() == nil)
        // After its CLOSE the receiver reads nothing more, whatever comes.
        #expect(try pair.receive([0xFF, 0xFF, 1, 2, 3]).isEmpty)
    }

    @Test func aCloseAfterTheAckStillWorksAsAWriteOfItsOwn() throws {
        let payloads = Self.payloads(1)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .multi], wantsMulti: true)
        var events: [SecureSenderSession.Event] = []
        for _ in 0..<10 {
            var written: [[UInt8]] = []
            while let value = pair.sender.nextValue() {
                for event in try pair.receive(value) {
                    if case .write(let write) = event { written.append(write) }
                    if case .complete = event {
                        written += try pair.receiver.acknowledgement(outcome: 0)
                        written += try pair.receiver.close(reason: 1)
                    }
                }
            }
            for value in written { events += try pair.sender.receiveWrite(value) }
        }
        #expect(events.suffix(2) == [.acknowledged(alreadyStored: false), .closedByCentral(reason: 1)])
        #expect(pair.sender.acknowledgedCount == 1)
    }

    @Test func aCloseWithTheAckIsRefusedWithoutMulti() throws {
        var pair = try SessionPair(payload: testPayload(10), valueLength: 182, offered: [.secure])
        _ = exchange(&pair, ackWrites: { _, _ in [] })
        #expect(throws: SecureSessionError.protocolViolation("CLOSE from the central in a session without multi")) {
            try pair.receiver.acknowledgement(outcome: 0, closingWith: 1)
        }
    }

    @Test func aCutAfterKAcksLosesOnlyTheMessageUnderWay() throws {
        let payloads = Self.payloads(5)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .multi], wantsMulti: true)
        let transcript = Self.run(&pair, payloads: payloads, valueLength: 182, cutAfterAcks: 2)
        // Two stored and acknowledged; the third was not started (stop-and-wait), so nothing
        // but the two acknowledged ones counts on either side.
        #expect(transcript.completed.map(\.payload) == Array(payloads.prefix(2)))
        #expect(pair.sender.acknowledgedCount == 2)
        #expect(pair.receiver.completedCount == 2)
    }

    @Test(arguments: [UInt32(1), 7])
    func aHeaderWithTheWrongMessageNumberEndsTheSession(first: UInt32) throws {
        let payload = testPayload(300)
        let hello = HelloV2(session: 42, offered: [.secure, .multi])
        let peripheral = HostIdentity()
        let central = HostIdentity()
        var sender = try SecureSenderSession(
            identity: peripheral, authorizedPeers: authorized(central), hello: hello, payload: payload,
            digest: Array(SHA256.hash(data: payload)), metadata: nil, maximumValueLength: 182, wantsMulti: true,
            firstMessageNumber: first)
        var receiver = SecureReceiverSession(identity: central, authorizedPeers: authorized(peripheral), hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        var failure: SecureSessionError?
        rounds: for _ in 0..<10 {
            var written: [[UInt8]] = []
            while let value = sender.nextValue() {
                do {
                    for case .write(let write) in try receiver.receiveNotification(value) { written.append(write) }
                } catch {
                    failure = error
                    break rounds
                }
            }
            for value in written { _ = try sender.receiveWrite(value) }
        }
        #expect(failure == .protocolViolation("HEADER of message \(first), message 0 expected"))
        #expect(receiver.completedCount == 0)
    }

    @Test func aCloseFromTheSenderBeforeTheAckIsRefused() throws {
        // The receiver expects CLOSE only after it acknowledged the message.
        let payloads = Self.payloads(1)
        var pair = try SessionPair(payload: payloads[0], valueLength: 182, offered: [.secure, .multi], wantsMulti: true)
        var complete = false
        for _ in 0..<10 {
            var written: [[UInt8]] = []
            while let value = pair.sender.nextValue() {
                for event in try pair.receive(value) {
                    if case .write(let write) = event { written.append(write) }
                    if case .complete = event { complete = true }
                }
            }
            for value in written { _ = try pair.sender.receiveWrite(value) }
        }
        #expect(complete)
        // The receiver never acknowledged, so it cannot close either.
        #expect(throws: SecureSessionError.self) { try pair.receiver.close(reason: 1) }
    }
}
