import Transfer
import Crypto
import TestSupport
import Testing

@testable import Trust

/// The `pipeline` capability (with `multi`): the sender may start the next message once the
/// current one's END went out, before its ACK; at most `PipelineWindow.messages` are
/// unacknowledged, the ACKs come in order, and the receiver refuses a HEADER while that many
/// completed messages await theirs. Without `pipeline` the stop-and-wait rule of `multi` holds. Both modes: secure
/// (keys, handshake, sealed records) and plain.
@Suite struct PipelineSessionTests {
    enum Mode: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case secure, keyless
        var testDescription: String { rawValue }
    }

    /// When the receiver writes the ACK of a completed message.
    enum AckTiming: String, CaseIterable, Sendable, CustomTestStringConvertible {
        /// When the next message's HEADER was read (one message pending at a time).
        case onNextHeader
        /// When the next message completed (two pending: the window is full).
        case onNextComplete
        var testDescription: String { rawValue }
    }

    /// What a pipelining central offers.
    static let offered: Capabilities = [.meta, .multi, .resume, .pipeline]
    static let sizes = [3000, 0, 9000, 5000]

    static func digest(_ payload: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: payload)) }

    static func payloads(_ sizes: [Int] = sizes) -> [[UInt8]] {
        sizes.enumerated().map { testPayload($1, seed: UInt64($0 + 41)) }
    }

    /// Both ends of one session in `mode` (`secure` is added to the offer in the secure mode).
    static func pair(_ mode: Mode, first: [UInt8], valueLength: Int, offered: Capabilities = offered,
                     wantsMulti: Bool = true, heldPrefix: HeldPrefix? = nil) throws -> SessionPair {
        switch mode {
        case .secure:
            try SessionPair(payload: first, valueLength: valueLength, offered: offered.union(.secure),
                            wantsMulti: wantsMulti, heldPrefix: heldPrefix)
        case .keyless:
            try SessionPair(keylessPayload: first, valueLength: valueLength, offered: offered, wantsMulti: wantsMulti,
                            heldPrefix: heldPrefix)
        }
    }

    // MARK: - A driver that pipelines

    struct PipelineTranscript {
        var completed: [(header: MessageHeader, payload: [UInt8])] = []
        /// The receiver's side, in order: "header k", "complete k", "ack k", "closed r", "end".
        var receiverOrder: [String] = []
        /// The sender's side, in order: "start k" (pipelined or not), "acknowledged", "finish"...
        var senderOrder: [String] = []
        var receiverEvents: [SecureReceiverSession.Event] = []
        var senderEvents: [SecureSenderSession.Event] = []
        var written: [[UInt8]] = []
        var notified: [[UInt8]] = []
        /// HEADER events that arrived while a completed message was still unacknowledged.
        var headersWhilePending = 0
        /// The most the sender reported unacknowledged, and the most the receiver held unacknowledged.
        var maxUnacknowledged = 0
        var maxPending = 0
        var receiverError: SecureSessionError?
        var senderError: SecureSessionError?
        /// A copy of the receiver taken at the first `.complete` that never acknowledges: what
        /// it made of the rest of the stream.
        var shadowOrder: [String] = []
        var shadowError: SecureSessionError?
    }

    /// Runs a session value by value (the receiver's writes reach the sender right after the
    /// value that caused them): the sender starts the next message as soon as
    /// `acceptsNextBeforeAck` (or on `.acknowledged`), and ends with `finish`; the receiver
    /// acknowledges late (`timing`), always the oldest pending message, and when the stream
    /// pauses with messages pending it acknowledges them all. `closingAt`: the ACK of that
    /// message carries CLOSE `01`. `shadow`: a copy of the receiver that never acknowledges
    /// reads the stream from the first `.complete` on.
    struct Driver {
        var pair: SessionPair
        let payloads: [[UInt8]]
        let timing: AckTiming
        var closingAt: UInt32?
        var outcome: UInt8 = 0
        var shadow = false
        var transcript = PipelineTranscript()
        private var nextPayload = 1
        private var pending: [MessageHeader] = []
        private var toSender: [[UInt8]] = []
        private var finished = false
        private var receiverClosed = false
        private var shadowReceiver: SecureReceiverSession?

        init(_ pair: SessionPair, payloads: [[UInt8]], timing: AckTiming, closingAt: UInt32? = nil,
             outcome: UInt8 = 0, shadow: Bool = false) {
            self.pair = pair
            self.payloads = payloads
            self.timing = timing
            self.closingAt = closingAt
            self.outcome = outcome
            self.shadow = shadow
        }

        private mutating func acknowledgeOldest() throws(SecureSessionError) {
            let header = pending.removeFirst()
            let closing = header.message == closingAt
            toSender += try pair.receiver.acknowledgement(outcome: outcome, closingWith: closing ? 1 : nil)
            transcript.receiverOrder.append("ack \(header.message)")
            if closing { receiverClosed = true }
        }

        private mutating func receive(_ value: [UInt8]) throws(SecureSessionError) {
            let events = try pair.receive(value)
            transcript.receiverEvents += events
            if shadow, shadowReceiver == nil, events.contains(where: { if case .complete = $0 { true } else { false } }) {
                shadowReceiver = pair.receiver
            } else if var copy = shadowReceiver, transcript.shadowError == nil {
                do {
                    for event in try copy.receiveNotification(value) {
                        if case .header(let header) = event { transcript.shadowOrder.append("header \(header.message)") }
                        if case .complete(let header) = event { transcript.shadowOrder.append("complete \(header.message)") }
                    }
                } catch {
                    transcript.shadowError = error
                }
                shadowReceiver = copy
            }
            for event in events {
                switch event {
                case .write(let write), .progressWrite(let write):
                    toSender.append(write)
                case .header(let header):
                    transcript.receiverOrder.append("header \(header.message)")
                    if !pending.isEmpty { transcript.headersWhilePending += 1 }
                    if timing == .onNextHeader, !pending.isEmpty { try acknowledgeOldest() }
                case .complete(let header):
                    transcript.receiverOrder.append("complete \(header.message)")
                    transcript.completed.append((header, pair.kept.completed.last?.bytes ?? []))
                    pending.append(header)
                    transcript.maxPending = max(transcript.maxPending, pending.count)
                    if timing == .onNextComplete, pending.count == 2 { try acknowledgeOldest() }
                case .closed(let reason):
                    transcript.receiverOrder.append("closed \(reason)")
                case .endOfStream:
                    transcript.receiverOrder.append("end")
                default:
                    break
                }
            }
        }

        /// The next message as soon as the sender takes it; `finish` once all were acknowledged.
        private mutating func startNextIfAllowed() throws(SecureSessionError) {
            let sender = pair.sender
            if nextPayload < payloads.count {
                guard sender.acceptsNextBeforeAck || sender.state == .acknowledged else { return }
                let payload = payloads[nextPayload]
                transcript.senderOrder.append("start \(nextPayload)\(sender.acceptsNextBeforeAck ? " before ack" : "")")
                nextPayload += 1
                try pair.sender.sendNext(payload: payload, digest: PipelineSessionTests.digest(payload), metadata: nil)
            } else if !finished, sender.state == .acknowledged {
                finished = true
                transcript.senderOrder.append("finish")
                try pair.sender.finish()
            }
        }

        private mutating func noteWindow() {
            transcript.maxUnacknowledged = max(transcript.maxUnacknowledged, pair.sender.unacknowledgedCount)
        }

        mutating func run(maximumSteps: Int = 100_000) {
            for _ in 0..<maximumSteps {
                var progressed = false
                if let value = pair.sender.nextValue() {
                    progressed = true
                    transcript.notified.append(value)
                    noteWindow()
                    do { try receive(value) } catch {
                        transcript.receiverError = error
                        return
                    }
                }
                if !toSender.isEmpty {
                    progressed = true
                    let writes = toSender
                    toSender = []
                    transcript.written += writes
                    do {
                        for write in writes {
                            for event in try pair.sender.receiveWrite(write) {
                                transcript.senderEvents.append(event)
                                switch event {
                                case .acknowledged: transcript.senderOrder.append("acknowledged")
                                case .closedByCentral(let reason): transcript.senderOrder.append("closed \(reason)")
                                case .refusedByCentral(let outcome): transcript.senderOrder.append("refused \(outcome)")
                                case .resumed(let offset): transcript.senderOrder.append("resumed \(offset)")
                                case .centralAuthenticated: break
                                }
                            }
                            noteWindow()
                        }
                    } catch {
                        transcript.senderError = error
                        return
                    }
                }
                do { try startNextIfAllowed() } catch {
                    transcript.senderError = error
                    return
                }
                noteWindow()
                if !progressed {
                    // The stream paused: the last messages' ACKs are due.
                    guard !pending.isEmpty, !receiverClosed else { return }
                    do {
                        while !pending.isEmpty, !receiverClosed { try acknowledgeOldest() }
                    } catch {
                        transcript.receiverError = error
                        return
                    }
                }
            }
            Issue.record("the session did not end within \(maximumSteps) steps")
        }
    }

    // MARK: - 1. Negotiation

    @Test(arguments: Mode.allCases)
    func pipelineIsChosenOnlyWithMultiOfferedAndWanted(mode: Mode) throws {
        let flags: [Capabilities] = [.multi, .pipeline, .meta, .resume]
        var chosenSomewhere = false
        for bits in 0..<(1 << flags.count) {
            let offered = Capabilities(flags.enumerated().filter { bits & (1 << $0.offset) != 0 }.map(\.element))
            for wantsMulti in [false, true] {
                let label = "\(mode) offered \(offered.rawValue) wantsMulti \(wantsMulti)"
                let expected = wantsMulti && offered.isSuperset(of: [.multi, .pipeline])
                var pair = try Self.pair(mode, first: testPayload(100), valueLength: 182, offered: offered, wantsMulti: wantsMulti)
                #expect(pair.sender.chosen.contains(.pipeline) == expected, "\(label)")
                #expect(pair.sender.pipelines == expected, "\(label)")
                #expect(!pair.sender.chosen.contains(.pipeline) || pair.sender.chosen.contains(.multi), "\(label)")
                #expect(!pair.sender.acceptsNextBeforeAck, "\(label)")
                #expect(pair.sender.unacknowledgedCount == 0, "\(label)")
                // The receiver learns it from the prefix, in the first value.
                let firstValue = pair.sender.nextValue()
                let first = try #require(firstValue)
                _ = try pair.receive(first)
                #expect(pair.receiver.hasReadPrefix, "\(label)")
                #expect(pair.receiver.pipelines == expected, "\(label)")
                #expect(pair.receiver.carriesSeveralMessages == (wantsMulti && offered.contains(.multi)), "\(label)")
                chosenSomewhere = chosenSomewhere || expected
            }
        }
        #expect(chosenSomewhere)
    }

    @Test func thePipelineBitTravelsInTheHelloAndThePrefix() throws {
        let hello = HelloV2(session: SessionPair.testSession, offered: [.secure, .multi, .pipeline])
        // Bit 4 of the capabilities' last byte, kept on receipt (a known capability).
        #expect(Array(hello.encoded.suffix(4)) == [0, 0, 0, 0x13])
        #expect(HelloV2(parsing: hello.encoded)?.offered == [.secure, .multi, .pipeline])
        #expect(Capabilities.known.contains(.pipeline))
        let prefix = StreamPrefix(answering: hello, supports: [.secure, .multi, .pipeline])
        #expect(try StreamPrefix(parsing: prefix.encoded, hello: hello).chosen == [.secure, .multi, .pipeline])
        // A prefix that chose `pipeline` without `multi` (a sender of another build) does not
        // make the receiver pipeline: it carries one message.
        var receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        let alone = StreamPrefix(answering: hello, supports: [.secure, .pipeline])
        #expect(alone.chosen == [.secure, .pipeline])
        #expect(try receiver.receiveNotification([0, 0] + alone.encoded).isEmpty)
        #expect(receiver.hasReadPrefix)
        #expect(!receiver.pipelines)
        #expect(!receiver.carriesSeveralMessages)
    }

    // MARK: - 2. A pipelined run

    @Test(arguments: Mode.allCases, [20, 182, 244])
    func fourMessagesCrossPipelinedWithLateAcksInOrder(mode: Mode, valueLength: Int) throws {
        let payloads = Self.payloads()
        for timing in AckTiming.allCases {
            let label = "\(mode) \(valueLength) \(timing)"
            let pair = try Self.pair(mode, first: payloads[0], valueLength: valueLength)
            #expect(pair.sender.pipelines, "\(label)")
            var driver = Driver(pair, payloads: payloads, timing: timing)
            driver.run()
            let transcript = driver.transcript
            #expect(transcript.receiverError == nil, "\(label)")
            #expect(transcript.senderError == nil, "\(label)")
            #expect(driver.pair.receiver.pipelines, "\(label)")

            // Every payload arrived intact, in order, numbered 0...3.
            #expect(transcript.completed.map(\.payload) == payloads, "\(label)")
            #expect(transcript.completed.map(\.header.message) == [0, 1, 2, 3], "\(label)")
            #expect(transcript.completed.map(\.header.digest) == payloads.map(Self.digest), "\(label)")

            // The next message started before the last one's ACK, every time, and the receiver
            // read each later HEADER while the message before was still unacknowledged.
            #expect(transcript.senderOrder == [
                "start 1 before ack", "acknowledged", "start 2 before ack", "acknowledged",
                "start 3 before ack", "acknowledged", "acknowledged", "finish",
            ], "\(label)")
            #expect(transcript.headersWhilePending == payloads.count - 1, "\(label)")
            #expect(transcript.headersWhilePending >= 1, "\(label)")
            switch timing {
            case .onNextHeader:
                #expect(transcript.receiverOrder == [
                    "header 0", "complete 0", "header 1", "ack 0", "complete 1", "header 2", "ack 1",
                    "complete 2", "header 3", "ack 2", "complete 3", "ack 3", "closed 0", "end",
                ], "\(label)")
                #expect(transcript.maxPending == 1, "\(label)")
            case .onNextComplete:
                #expect(transcript.receiverOrder == [
                    "header 0", "complete 0", "header 1", "complete 1", "ack 0", "header 2", "complete 2", "ack 1",
                    "header 3", "complete 3", "ack 2", "ack 3", "closed 0", "end",
                ], "\(label)")
                // The window was full: two messages unacknowledged on both sides.
                #expect(transcript.maxPending == 2, "\(label)")
                #expect(transcript.maxUnacknowledged == 2, "\(label)")
            }
            #expect(transcript.maxUnacknowledged <= 2, "\(label)")
            #expect(transcript.maxUnacknowledged >= 1, "\(label)")

            // Four ACKs, then CLOSE 00 and EOM end the stream.
            let senderEvents = transcript.senderEvents.filter { if case .centralAuthenticated = $0 { false } else { true } }
            #expect(senderEvents == Array(repeating: .acknowledged(alreadyStored: false), count: 4), "\(label)")
            #expect(driver.pair.sender.acknowledgedCount == 4, "\(label)")
            #expect(driver.pair.sender.unacknowledgedCount == 0, "\(label)")
            #expect(driver.pair.sender.state == .acknowledged, "\(label)")
            #expect(driver.pair.sender.endOfMessageSent, "\(label)")
            #expect(driver.pair.sender.nextValue() == nil, "\(label)")
            #expect(driver.pair.sender.payloadBytesNotified == payloads.map(\.count).reduce(0, +), "\(label)")
            #expect(driver.pair.receiver.completedCount == 4, "\(label)")
            #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream], "\(label)")
            #expect(transcript.notified.last == SequencedStream.endOfMessage, "\(label)")

            // Keys or not, every frame on the wire either way is a handshake message or a
            // sealed record: nothing travels in clear after the prefix.
            let prefixLength = StreamPrefix.encodedLength
            let notifiedFrames = try frames(in: Array(streamBytes(transcript.notified).dropFirst(prefixLength)))
            let writtenFrames = try frames(in: streamBytes(transcript.written))
            #expect((notifiedFrames + writtenFrames).allSatisfy { $0.type == .sealed || $0.type == .handshake },
                    "\(label)")
            #expect(writtenFrames.filter { $0.type == .sealed }.count >= payloads.count, "\(label): one sealed ACK a message")
        }
    }

    @Test(arguments: Mode.allCases)
    func aPipelinedMessageResumesWhileTheOneBeforeAwaitsItsAck(mode: Mode) throws {
        let payloads = Self.payloads()
        let held = Array(payloads[2].prefix(5000))
        let third = Self.digest(payloads[2])
        let pair = try Self.pair(mode, first: payloads[0], valueLength: 182, heldPrefix: { _, header in
            header.digest == third ? held : []
        })
        var driver = Driver(pair, payloads: payloads, timing: .onNextComplete)
        driver.run()
        let transcript = driver.transcript
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == payloads)
        #expect(transcript.receiverEvents.contains(.resumed(offset: 5000)))
        #expect(transcript.senderOrder == [
            "start 1 before ack", "acknowledged", "start 2 before ack", "resumed 5000", "acknowledged",
            "start 3 before ack", "acknowledged", "acknowledged", "finish",
        ])
        #expect(driver.pair.sender.acknowledgedCount == 4)
        #expect(Array(transcript.receiverEvents.suffix(2)) == [.closed(reason: 0), .endOfStream])
    }

    // MARK: - Stepping by hand

    /// A session in `mode` whose sender has sent message 0 (`payloads[0]`) whole and, before
    /// its ACK, has started message 1 with `payloads[next]`.
    static func pairWithNextUnderway(_ mode: Mode, payloads: [[UInt8]], next: Int) throws -> SessionPair {
        var pair = try Self.pair(mode, first: payloads[0], valueLength: 182)
        try Self.sendUntilPaused(&pair)
        try pair.sender.sendNext(payload: payloads[next], digest: Self.digest(payloads[next]), metadata: nil)
        return pair
    }

    /// Hands every value the sender has to the receiver (the handshake's writes go back to the
    /// sender; completed messages are not acknowledged) until the sender pauses. Returns the
    /// headers completed.
    @discardableResult
    static func sendUntilPaused(_ pair: inout SessionPair, maximumValues: Int = .max) throws -> [MessageHeader] {
        var completed: [MessageHeader] = []
        var handedOut = 0
        while handedOut < maximumValues {
            var writes: [[UInt8]] = []
            var any = false
            while handedOut < maximumValues, let value = pair.sender.nextValue() {
                any = true
                handedOut += 1
                for event in try pair.receive(value) {
                    if case .write(let write) = event { writes.append(write) }
                    if case .complete(let header) = event { completed.append(header) }
                }
            }
            for write in writes { _ = try pair.sender.receiveWrite(write) }
            if !any && writes.isEmpty { break }
        }
        return completed
    }

    static func deliver(_ writes: [[UInt8]], to sender: inout SecureSenderSession) throws -> [SecureSenderSession.Event] {
        var events: [SecureSenderSession.Event] = []
        for write in writes { events += try sender.receiveWrite(write) }
        return events
    }

    // MARK: - 3. The window (`PipelineWindow.messages`)

    @Test(arguments: Mode.allCases)
    func theSenderHoldsAtMostAWindowOfUnacknowledgedMessages(mode: Mode) throws {
        let window = PipelineWindow.messages
        let payloads = Self.payloads(Array(repeating: 1500, count: window + 1))
        var pair = try Self.pair(mode, first: payloads[0], valueLength: 182)
        #expect(try Self.sendUntilPaused(&pair).map(\.message) == [0])
        #expect(pair.sender.state == .awaitingAck)
        #expect(pair.sender.unacknowledgedCount == 1)
        #expect(!pair.sender.endOfMessageSent)
        #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
        // Each message may start once the last one's END went out, until the window is full.
        for next in 1..<window {
            #expect(pair.sender.acceptsNextBeforeAck)
            try pair.sender.sendNext(payload: payloads[next], digest: Self.digest(payloads[next]), metadata: nil)
            #expect(pair.sender.currentMessageNumber == UInt32(next))
            #expect(pair.sender.state == .sending)
            #expect(pair.sender.unacknowledgedCount == next)
            #expect(!pair.sender.acceptsNextBeforeAck)
            #expect(try Self.sendUntilPaused(&pair).map(\.message) == [UInt32(next)])
            #expect(pair.sender.unacknowledgedCount == next + 1)
        }
        // The window is full.
        #expect(pair.sender.state == .awaitingAck)
        #expect(!pair.sender.acceptsNextBeforeAck)
        #expect(throws: SecureSessionError.protocolViolation("a next message before the last one was acknowledged")) {
            try pair.sender.sendNext(payload: payloads[window], digest: Self.digest(payloads[window]), metadata: nil)
        }
        #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
        #expect(pair.sender.nextValue() == nil)
        #expect(pair.sender.currentMessageNumber == UInt32(window - 1))

        // Each earlier message's ACK frees one place; the current message's state stays.
        for acknowledged in 1..<window {
            let delivered = try Self.deliver(pair.receiver.acknowledgement(outcome: 0), to: &pair.sender)
            #expect(delivered == [.acknowledged(alreadyStored: false)])
            #expect(pair.sender.acknowledgedCount == acknowledged)
            #expect(pair.sender.unacknowledgedCount == window - acknowledged)
            #expect(pair.sender.state == .awaitingAck)
            #expect(pair.sender.acceptsNextBeforeAck)
            #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
        }

        // The last ACK: all acknowledged, the stream may end.
        let last = try Self.deliver(pair.receiver.acknowledgement(outcome: 1), to: &pair.sender)
        #expect(last == [.acknowledged(alreadyStored: true)])
        #expect(pair.sender.acknowledgedCount == window)
        #expect(pair.sender.unacknowledgedCount == 0)
        #expect(pair.sender.state == .acknowledged)
        #expect(!pair.sender.acceptsNextBeforeAck)
        try pair.sender.finish()
        #expect(throws: SecureSessionError.self) { try pair.receiver.acknowledgement(outcome: 0) }
        var events: [SecureReceiverSession.Event] = []
        while let value = pair.sender.nextValue() { events += try pair.receive(value) }
        #expect(events == [.closed(reason: 0), .endOfStream])
    }

    @Test(arguments: Mode.allCases, [20, 244])
    func aReceiverRefusesAHeaderPastTheWindow(mode: Mode, valueLength: Int) throws {
        // A copy of the receiver taken at message 0's `.complete` never acknowledges; the
        // sender goes on as the acknowledging receiver lets it. The copy takes the messages up
        // to the window (one more pending each) and refuses the next HEADER.
        let window = PipelineWindow.messages
        let payloads = Self.payloads(Self.sizes + Array(repeating: 700, count: window))
        let pair = try Self.pair(mode, first: payloads[0], valueLength: valueLength)
        for timing in AckTiming.allCases {
            var driver = Driver(pair, payloads: payloads, timing: timing, shadow: true)
            driver.run()
            let transcript = driver.transcript
            #expect(transcript.receiverError == nil && transcript.senderError == nil, "\(timing)")
            #expect(transcript.completed.map(\.payload) == payloads, "\(timing)")
            #expect(transcript.shadowOrder == (1..<window).flatMap { ["header \($0)", "complete \($0)"] }, "\(timing)")
            #expect(transcript.shadowError
                    == .protocolViolation("HEADER of message \(window) before message 0 was acknowledged"), "\(timing)")
            #expect(transcript.maxUnacknowledged <= window, "\(timing)")
        }
    }

    @Test(arguments: Mode.allCases)
    func aForgedHeaderPastTheWindowIsRefused(mode: Mode) throws {
        // The receiver holds a window of messages unacknowledged; a HEADER for the next (the
        // sender's own, sealed in order, its ACKs given by a copy of the receiver) is refused.
        let window = PipelineWindow.messages
        let payloads = Self.payloads((0...window).map { 700 + 100 * $0 })
        var pair = try Self.pairWithNextUnderway(mode, payloads: payloads, next: 1)
        #expect(try Self.sendUntilPaused(&pair).map(\.message) == [1])
        for next in 2..<window {
            try pair.sender.sendNext(payload: payloads[next], digest: Self.digest(payloads[next]), metadata: nil)
            #expect(try Self.sendUntilPaused(&pair).map(\.message) == [UInt32(next)])
        }
        var acknowledging = pair.receiver
        _ = try Self.deliver(acknowledging.acknowledgement(outcome: 0), to: &pair.sender)
        try pair.sender.sendNext(payload: payloads[window], digest: Self.digest(payloads[window]), metadata: nil)
        var values: [[UInt8]] = []
        while let value = pair.sender.nextValue() { values.append(value) }
        #expect(pair.sender.unacknowledgedCount == window)
        var failure: SecureSessionError?
        var events: [SecureReceiverSession.Event] = []
        for value in values where failure == nil {
            do { events += try pair.receive(value) } catch { failure = error }
        }
        #expect(failure == .protocolViolation("HEADER of message \(window) before message 0 was acknowledged"))
        #expect(!events.contains { if case .header = $0 { true } else { false } })
        #expect(pair.receiver.completedCount == window)
        // The session is over: no ACK for any of them comes out of it.
        #expect(throws: SecureSessionError.self) { try pair.receiver.acknowledgement(outcome: 0) }
        // The copy that acknowledged message 0 takes the same values.
        var taken: [SecureReceiverSession.Event] = []
        for value in values { taken += try acknowledging.receiveNotification(value) }
        let expected = MessageHeader(message: UInt32(window), payloadLength: UInt64(payloads[window].count),
                                     digest: Self.digest(payloads[window]))
        #expect(taken.contains(.header(expected)))
        #expect(taken.contains(.complete(header: expected)))
    }

    // MARK: - 4. ACKs in order

    @Test(arguments: Mode.allCases, [false, true])
    func anAckForTheCurrentMessageBeforeTheEarlierOneIsAProtocolViolation(mode: Mode, currentEndSent: Bool) throws {
        let payloads = Self.payloads()
        var pair = try Self.pairWithNextUnderway(mode, payloads: payloads, next: 2)
        // Message 1 under way (some DATA out), or wholly sent.
        try Self.sendUntilPaused(&pair, maximumValues: currentEndSent ? .max : 10)
        #expect(pair.sender.state == (currentEndSent ? .awaitingAck : .sending))
        #expect(pair.sender.unacknowledgedCount == (currentEndSent ? 2 : 1))
        let forged = try pair.receiver.forgeRecord(.ack(SecureAck(message: 1, digest: Self.digest(payloads[2]), outcome: .stored)))
        #expect(throws: SecureSessionError.protocolViolation("ACK for message 1, message 0 awaits one first")) {
            try Self.deliver(forged, to: &pair.sender)
        }
        #expect(pair.sender.state == .failed)
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(pair.sender.nextValue() == nil)
        // The genuine ACK for message 0 comes too late: the session is over.
        #expect(throws: SecureSessionError.self) { try Self.deliver(pair.receiver.acknowledgement(outcome: 0), to: &pair.sender) }
        #expect(pair.sender.acknowledgedCount == 0)
    }

    @Test(arguments: Mode.allCases)
    func anAckForTheEarlierMessageMustNameItsDigest(mode: Mode) throws {
        let payloads = Self.payloads()
        var pair = try Self.pairWithNextUnderway(mode, payloads: payloads, next: 1)
        // Message 0's number with message 1's SHA-256.
        let forged = try pair.receiver.forgeRecord(.ack(SecureAck(message: 0, digest: Self.digest(payloads[1]), outcome: .stored)))
        #expect(throws: SecureSessionError.protocolViolation("ACK names another SHA-256")) {
            try Self.deliver(forged, to: &pair.sender)
        }
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(pair.sender.state == .failed)
    }

    @Test(arguments: Mode.allCases)
    func aResumeForTheEarlierMessageIsIgnored(mode: Mode) throws {
        let payloads = Self.payloads()
        var pair = try Self.pairWithNextUnderway(mode, payloads: payloads, next: 2)
        #expect(pair.sender.chosen.contains(.resume))
        try Self.sendUntilPaused(&pair, maximumValues: 5)
        let sentBefore = pair.sender.payloadBytesSent
        let delivered3 = try Self.deliver(pair.receiver.forgeRecord(.resume(message: 0, offset: 1000)), to: &pair.sender)
        #expect(delivered3.isEmpty)
        #expect(pair.sender.state == .sending)
        #expect(pair.sender.resumedAt == nil)
        #expect(pair.sender.unacknowledgedCount == 1)
        // Message 0's ACK still counts, and message 1 continues where it was.
        let delivered4 = try Self.deliver(pair.receiver.acknowledgement(outcome: 0), to: &pair.sender)
        #expect(delivered4 == [.acknowledged(alreadyStored: false)])
        let paused11 = try Self.sendUntilPaused(&pair)
        #expect(paused11.map(\.message) == [1])
        #expect(pair.sender.payloadBytesSent == payloads[2].count)
        #expect(sentBefore < payloads[2].count)
        let delivered5 = try Self.deliver(pair.receiver.acknowledgement(outcome: 0), to: &pair.sender)
        #expect(delivered5 == [.acknowledged(alreadyStored: false)])
        #expect(pair.sender.acknowledgedCount == 2)
    }

    @Test(arguments: Mode.allCases)
    func theNextMessageStartsOnlyOnceTheEndWentOut(mode: Mode) throws {
        // END sealed (state `.awaitingAck`) is not END handed out: until its last value went
        // out the next message may not start, and an ACK for it cannot be genuine.
        let payloads = Self.payloads()
        var windows = 0
        for length in 3000..<3008 {
            let first = testPayload(length, seed: UInt64(length))
            var pair = try Self.pair(mode, first: first, valueLength: 20)
            var completed = false
            var checked = false
            rounds: for _ in 0..<10 {
                var writes: [[UInt8]] = []
                while let value = pair.sender.nextValue() {
                    for event in try pair.receive(value) {
                        if case .write(let write) = event { writes.append(write) }
                        if case .complete = event { completed = true }
                    }
                    guard pair.sender.state == .awaitingAck, !completed, !checked else { continue }
                    // Sealed, not all handed out (a copy of the sender still has values).
                    var probe = pair.sender
                    guard probe.nextValue() != nil else { continue }
                    checked = true
                    windows += 1
                    let label = "\(mode) \(length)"
                    #expect(!pair.sender.acceptsNextBeforeAck, "\(label)")
                    #expect(throws: SecureSessionError.self, "\(label)") {
                        try pair.sender.sendNext(payload: payloads[1], digest: Self.digest(payloads[1]), metadata: nil)
                    }
                    #expect(pair.sender.currentMessageNumber == 0, "\(label)")
                    // An ACK now names a message whose END the central cannot have read.
                    var early = pair
                    let forged = try early.receiver.forgeRecord(.ack(SecureAck(message: 0, digest: Self.digest(first), outcome: .stored)))
                    #expect(throws: SecureSessionError.protocolViolation("ACK before the message was sent"), "\(label)") {
                        try Self.deliver(forged, to: &early.sender)
                    }
                    #expect(early.sender.acknowledgedCount == 0, "\(label)")
                }
                for write in writes { _ = try pair.sender.receiveWrite(write) }
                if completed { break rounds }
            }
            #expect(completed, "\(mode) \(length)")
            // Once END went out, the next message may start before the ACK.
            #expect(pair.sender.acceptsNextBeforeAck, "\(mode) \(length)")
        }
        #expect(windows > 0)
    }

    // MARK: - 5. Without pipeline: stop-and-wait

    @Test(arguments: Mode.allCases)
    func withoutPipelineTheSenderWaitsForEachAck(mode: Mode) throws {
        let payloads = Self.payloads()
        var pair = try Self.pair(mode, first: payloads[0], valueLength: 182, offered: [.meta, .multi, .resume])
        #expect(pair.sender.carriesSeveralMessages)
        #expect(!pair.sender.pipelines)
        let paused12 = try Self.sendUntilPaused(&pair)
        #expect(paused12.map(\.message) == [0])
        #expect(!pair.receiver.pipelines)
        #expect(pair.sender.state == .awaitingAck)
        #expect(pair.sender.unacknowledgedCount == 1)
        #expect(!pair.sender.acceptsNextBeforeAck)
        #expect(throws: SecureSessionError.protocolViolation("a next message before the last one was acknowledged")) {
            try pair.sender.sendNext(payload: payloads[1], digest: Self.digest(payloads[1]), metadata: nil)
        }
        #expect(pair.sender.nextValue() == nil)
        let delivered6 = try Self.deliver(pair.receiver.acknowledgement(outcome: 0), to: &pair.sender)
        #expect(delivered6 == [.acknowledged(alreadyStored: false)])
        #expect(pair.sender.unacknowledgedCount == 0)
        try pair.sender.sendNext(payload: payloads[1], digest: Self.digest(payloads[1]), metadata: nil)
    }

    @Test(arguments: Mode.allCases, AckTiming.allCases)
    func withoutPipelineTheReceiverRefusesAHeaderBeforeItsAck(mode: Mode, timing: AckTiming) throws {
        let payloads = Self.payloads()
        let pair = try Self.pair(mode, first: payloads[0], valueLength: 182, offered: [.meta, .multi, .resume])
        var driver = Driver(pair, payloads: payloads, timing: timing, shadow: true)
        driver.run()
        let transcript = driver.transcript
        // The run itself is stop-and-wait: no message starts before the last one's ACK.
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completed.map(\.payload) == payloads)
        #expect(transcript.headersWhilePending == 0)
        #expect(transcript.maxUnacknowledged == 1)
        #expect(transcript.maxPending == 1)
        #expect(!transcript.senderOrder.contains { $0.hasSuffix("before ack") })
        #expect(transcript.senderOrder == ["acknowledged", "start 1", "acknowledged", "start 2", "acknowledged", "start 3",
                                           "acknowledged", "finish"])
        // The copy that never acknowledged refuses the next HEADER (the old rule).
        #expect(transcript.shadowOrder.isEmpty)
        #expect(transcript.shadowError == .protocolViolation("HEADER of message 1 before message 0 was acknowledged"))
    }

    // MARK: - 6. The central closes while the next message is under way

    @Test(arguments: Mode.allCases, AckTiming.allCases)
    func aCentralCloseWhileTheNextMessageIsUnderWayLeavesItUnacknowledged(mode: Mode, timing: AckTiming) throws {
        let payloads = Self.payloads()
        let pair = try Self.pair(mode, first: payloads[0], valueLength: 182)
        // The receiver takes messages 0 and 1: message 1's ACK carries CLOSE 01, written once
        // message 2's HEADER was read (or message 2 completed).
        var driver = Driver(pair, payloads: payloads, timing: timing, closingAt: 1)
        driver.run()
        let transcript = driver.transcript
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.senderOrder == ["start 1 before ack", "acknowledged", "start 2 before ack", "acknowledged", "closed 1"])
        #expect(Array(transcript.senderEvents.suffix(2)) == [.acknowledged(alreadyStored: false), .closedByCentral(reason: 1)])
        #expect(driver.pair.sender.state == .closedByCentral)
        #expect(driver.pair.sender.acknowledgedCount == 2)
        // The sender was already sending message 2: it is not acknowledged.
        #expect(driver.pair.sender.currentMessageNumber == 2)
        #expect(transcript.receiverOrder.contains("header 2"))
        #expect(!transcript.receiverOrder.contains("ack 2"))
        #expect(driver.pair.sender.nextValue() == nil)
        #expect(!driver.pair.sender.endOfMessageSent)
        #expect(throws: SecureSessionError.self) { try driver.pair.sender.finish() }
        #expect(throws: SecureSessionError.self) {
            try driver.pair.sender.sendNext(payload: payloads[3], digest: Self.digest(payloads[3]), metadata: nil)
        }
        switch timing {
        case .onNextHeader: #expect(transcript.completed.map(\.payload) == Array(payloads.prefix(2)))
        case .onNextComplete: #expect(transcript.completed.map(\.payload) == Array(payloads.prefix(3)))
        }
        #expect(!transcript.receiverOrder.contains("end"))
        // After its CLOSE the receiver reads nothing more.
        #expect(try driver.pair.receive([0xFF, 0xFF, 1, 2, 3]).isEmpty)
    }

    // MARK: - A refused earlier message ends the session

    @Test(arguments: Mode.allCases)
    func aRefusedEarlierMessageStopsTheNextOne(mode: Mode) throws {
        let payloads = Self.payloads()
        var pair = try Self.pairWithNextUnderway(mode, payloads: payloads, next: 2)
        try Self.sendUntilPaused(&pair, maximumValues: 5)
        #expect(pair.sender.state == .sending)
        // The central refuses message 0 (over a limit) while message 1 is under way.
        let delivered7 = try Self.deliver(pair.receiver.acknowledgement(outcome: 2), to: &pair.sender)
        #expect(delivered7 == [.refusedByCentral(outcome: 2)])
        #expect(pair.sender.state == .failed)
        #expect(pair.sender.acknowledgedCount == 0)
        #expect(!pair.sender.acceptsNextBeforeAck)
        // The session is over: nothing more goes out, and the state stays `.failed`.
        #expect(pair.sender.nextValue() == nil)
        #expect(pair.sender.state == .failed)
        #expect(throws: SecureSessionError.self) {
            try pair.sender.sendNext(payload: payloads[3], digest: Self.digest(payloads[3]), metadata: nil)
        }
        #expect(throws: SecureSessionError.self) { try pair.sender.finish() }
    }
}
