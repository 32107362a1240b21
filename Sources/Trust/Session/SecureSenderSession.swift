// The fuzz harness (scripts/fuzz/trust) compiles Trust as one module with Transfer's
// MessagePayload.swift in it, where there is no Transfer module to import.
#if canImport(Transfer)
import Transfer
#endif
import Crypto

/// Peripheral side (data holder, Noise initiator) of one version-2 secure session carrying one message, or with
/// `multi` several in turn (docs/wire-v2.md, sections 2 to 5). Always secure: a host without an identity uses a key
/// made for the run, and `AuthorizedPeers.anyKey` accepts any central's key (encrypted, not authenticated).
///
/// Notifications: prefix and message 1; a pause until the central's message 2 came and its key is authorized (an
/// unauthorized central gets nothing more); message 3, sealed HEADER, DATA, END, CLOSE `00`, bare `EOM`. The central
/// writes message 2, then the sealed ACK. Records are sealed lazily as values are taken: the payload is never copied.
///
/// `multi`: stop-and-wait after each END (a hostile central makes this side hold one message at most); on
/// `.acknowledged` the caller calls `sendNext` or `finish` (CLOSE `00`, `EOM`). The central's CLOSE ends the session
/// at once; an unacknowledged message is then not delivered. `resume`: once per message the central may write a
/// RESUME with the bytes it holds from an earlier session; DATA continues from there (or from further on, if already
/// there). `window`: DATA runs at most `FlowWindow.bytes` beyond the central's last PROGRESS (or the RESUME offset,
/// or 0) and pauses there, bounding what a cut link loses whatever the queues hold.
package struct SecureSenderSession: Sendable {
    package enum State: Sendable, Equatable {
        case awaitingHandshake, sending, awaitingAck, acknowledged, failed
        /// The central wrote CLOSE: nothing more is sent or read.
        case closedByCentral
    }

    package enum Event: Sendable, Equatable {
        /// Message 2 was read and its key is authorized: message 3 and the records follow.
        case centralAuthenticated(AuthorizedPeers.Peer)
        /// A sealed ACK for our message with our full digest, outcome `00` or `01`.
        case acknowledged(alreadyStored: Bool)
        /// The central's CLOSE (`01`: it takes no more); an unacknowledged message is not delivered.
        case closedByCentral(reason: UInt8)
        /// ACK outcome `02` or `03`: not stored; state `.failed`, the session is over.
        case refusedByCentral(outcome: UInt8)
        /// RESUME: the central holds the first `offset` bytes; DATA continues from there.
        case resumed(offset: UInt64)
    }

    /// The records after message 3, in the order they are sealed.
    enum NextRecord: Sendable, Equatable {
        case header
        case data(offset: Int)
        case end
        case close
        case none
    }

    package private(set) var state: State
    package let chosen: Capabilities
    package private(set) var remotePeer: AuthorizedPeers.Peer?
    package private(set) var payloadBytesSent = 0
    /// Payload bytes handed out in DATA during the whole session (all messages, skips not counted).
    package private(set) var payloadBytesNotified = 0
    /// Where the current message's DATA started after a RESUME (nil: not resumed).
    package private(set) var resumedAt: UInt64?
    package private(set) var endOfMessageSent = false

    private let authorizedPeers: AuthorizedPeers
    private var payload: MessagePayload {
        didSet { window = PayloadWindow() }
    }
    /// File bytes held for DATA, read by the caller (`payloadWanted`, `providePayload`); memory is sliced directly.
    private var window = PayloadWindow()
    private var header: MessageHeader
    /// `multi`: the stream pauses after each END; the caller decides what follows.
    package var carriesSeveralMessages: Bool { chosen.contains(.multi) }
    package private(set) var acknowledgedCount = 0
    /// The message being sent (or last sent).
    package var currentMessageNumber: UInt32 { header.message }
    private var handshake: NoiseXXHandshake?
    private var sealer: RecordSealer?
    private var opener: RecordOpener?
    private var writer: SequencedStreamWriter
    private var writesReader = SequencedStreamReader()
    private var frames = FrameReader()
    private(set) var nextRecord = NextRecord.header
    /// Stream offsets at which a DATA record's frame ends, with the payload bytes sent through it.
    private var payloadMarks: [(streamEnd: Int, payloadEnd: Int, bytes: Int)] = []
    private var payloadMarksStart = 0
    /// Stream offset after the sealed END: an ACK before it was handed out cannot be genuine.
    private var endRecordStreamEnd: Int?
    /// Stream offset after the sealed HEADER: a RESUME before it was handed out cannot be genuine.
    private var headerRecordStreamEnd: Int?
    /// Pipeline: earlier messages whose END went out, awaiting ACKs, oldest first (`PipelineWindow.messages` − 1 max).
    private var unacknowledgedEarlier: [(header: MessageHeader, endStreamEnd: Int)] = []
    /// The central wrote RESUME for the current message (at most once per message).
    private var resumeReceived = false
    /// `window`: bytes of the current message the central reported holding (PROGRESS, RESUME).
    private var centralHolds = 0
    /// CLOSE `00` is sealed: `EOM` follows once it is handed out.
    private var closeSealed = false
    private var failure: SecureSessionError?

    /// - Parameters:
    ///   - digest: SHA-256 of `payload` (32 bytes).
    ///   - metadata: sent in the HEADER when the central offered `meta`.
    ///   - maximumValueLength: ATT MTU − 3 (brought within 20...512).
    ///   - wantsMulti: this side may have more messages; `multi` is chosen when the central offered it.
    ///   - firstMessageNumber: what the first HEADER carries (0 on the wire; tests number wrongly).
    /// - Throws: `.notSecure` if `hello` does not offer `secure`.
    package init(
        identity: HostIdentity, authorizedPeers: AuthorizedPeers, hello: HelloV2,
        payload: MessagePayload, digest: [UInt8], metadata: FileMetadata?,
        maximumValueLength: Int, wantsMulti: Bool = false, acceptsResume: Bool = true, acceptsWindow: Bool = true,
        overChannel: Bool = false, firstMessageNumber: UInt32 = 0
    ) throws(SecureSessionError) {
        guard hello.offered.contains(.secure) else { throw .notSecure }
        guard digest.count == 32 else { throw .protocolViolation("message digest of \(digest.count) bytes, not 32") }
        // A HELLO read from an L2CAP channel must say so (it is bound into the prologue), and
        // one read from GATT must not get the channel's long values.
        guard !overChannel || hello.offered.contains(.channel) else {
            throw .protocolViolation("a HELLO on an L2CAP channel that does not offer the channel capability")
        }
        var chosen: Capabilities = .secure
        if overChannel { chosen.insert(.channel) }
        // `meta` is chosen whenever offered in a multi session: a later message may be named.
        if metadata != nil || wantsMulti, hello.offered.contains(.meta) { chosen.insert(.meta) }
        if wantsMulti, hello.offered.contains(.multi) { chosen.insert(.multi) }
        if wantsMulti, hello.offered.isSuperset(of: [.multi, .pipeline]) { chosen.insert(.pipeline) }
        // Costs nothing when the central holds no checkpoint: it then writes no RESUME.
        if acceptsResume, hello.offered.contains(.resume) { chosen.insert(.resume) }
        // A central that reports what it holds bounds what a cut link loses.
        if acceptsWindow, hello.offered.contains(.window) { chosen.insert(.window) }
        let prefix = StreamPrefix(answering: hello, supports: chosen)
        self.chosen = prefix.chosen
        self.authorizedPeers = authorizedPeers
        self.payload = payload
        header = MessageHeader(
            message: firstMessageNumber, payloadLength: UInt64(payload.count), digest: digest,
            metadata: chosen.contains(.meta) ? metadata : nil)
        writer = SequencedStreamWriter(maximumValueLength: maximumValueLength, overChannel: overChannel)
        writesReader = SequencedStreamReader(overChannel: overChannel)
        var handshake = NoiseXXHandshake(
            role: .initiator, staticKey: identity.privateKey,
            prologue: StreamPrefix.prologue(hello: hello, prefix: prefix))
        state = .awaitingHandshake
        do {
            let message1 = try handshake.writeMessage()
            writer.append(prefix.encoded + Frame(type: .handshake, body: message1).encoded)
            writer.flush()
        } catch {
            throw SecureSessionError(error)
        }
        self.handshake = handshake
    }

    /// File bytes the next DATA record needs, for `providePayload` (nil: none); meanwhile `nextValue` gives nil.
    package var payloadWanted: Range<Int>? {
        guard failure == nil, case .data(let offset) = nextRecord, mayHandOutData(at: offset) else { return nil }
        return window.wanted(offset..<min(offset + RecordMessage.dataBytesPerRecord, payload.count), in: payload)
    }

    /// Bytes of the payload's file read at `offset`, as `payloadWanted` asked.
    package mutating func providePayload(_ bytes: [UInt8], at offset: Int) {
        window.keep(bytes, at: offset)
    }

    /// The payload's file could not be read: nothing more goes out (the central keeps nothing of
    /// a message without its END); `localFailure` says why.
    package mutating func payloadUnreadable(_ reason: String) {
        failure = .payloadUnreadable(reason)
        state = .failed
    }

    /// Why the session failed on this side (unreadable payload file), once it has.
    package var localFailure: SecureSessionError? {
        if case .payloadUnreadable = failure { failure } else { nil }
    }

    /// The next notification value; nil while waiting for the central (after message 1 or `EOM`) or failed.
    package mutating func nextValue() -> [UInt8]? {
        // `.failed` without a `failure`: the central refused a message (ACK `02`/`03`), with
        // `pipeline` possibly while the next one was under way; nothing more goes out.
        guard failure == nil, !endOfMessageSent, state != .closedByCentral, state != .failed else { return nil }
        if sealer != nil { produceRecords() }
        if let value = writer.nextValue() {
            notePayloadHandedOut()
            return value
        }
        guard sealer != nil, closeSealed, writer.pendingCount == 0 else { return nil }
        endOfMessageSent = true
        if state == .sending { state = .awaitingAck }
        return SequencedStream.endOfMessage
    }

    /// `pipeline` (with `multi`): the next message may start before the last one's ACK
    /// (`acceptsNextBeforeAck`), `PipelineWindow.messages` at most unacknowledged.
    package var pipelines: Bool { chosen.contains(.pipeline) && carriesSeveralMessages }

    /// Pipeline: END went out, fewer than the window await ACKs, not closing: `sendNext` may go.
    package var acceptsNextBeforeAck: Bool {
        // END sealed (`.awaitingAck`) is not END handed out: until then an ACK for the message
        // cannot be genuine, and the earlier message's ACK is not checked against its END.
        guard let endRecordStreamEnd, writer.bytesHandedOut >= endRecordStreamEnd else { return false }
        return pipelines && state == .awaitingAck && unacknowledgedEarlier.count < PipelineWindow.messages - 1
            && nextRecord == .none
            && !closeSealed && failure == nil
    }

    /// Messages sent (END out or sealed) awaiting their ACK: 0 or 1, with `pipeline` up to the window.
    package var unacknowledgedCount: Int {
        unacknowledgedEarlier.count + (state == .awaitingAck ? 1 : 0)
    }

    /// Multi: after `.acknowledged` (or while `acceptsNextBeforeAck`), the next message (number + 1),
    /// sent right away; `payloadBytesSent` counts from 0 again.
    package mutating func sendNext(payload: MessagePayload, digest: [UInt8], metadata: FileMetadata?) throws(SecureSessionError) {
        guard carriesSeveralMessages else { throw .protocolViolation("a next message, but multi was not chosen") }
        let pipelined = acceptsNextBeforeAck
        guard state == .acknowledged || pipelined, failure == nil, nextRecord == .none, !closeSealed else {
            throw .protocolViolation("a next message before the last one was acknowledged")
        }
        guard digest.count == 32 else { throw .protocolViolation("message digest of \(digest.count) bytes, not 32") }
        guard header.message < UInt32.max else { throw .protocolViolation("message numbers exhausted") }
        if pipelined, let endRecordStreamEnd { unacknowledgedEarlier.append((header, endRecordStreamEnd)) }
        self.payload = payload
        header = MessageHeader(
            message: header.message + 1, payloadLength: UInt64(payload.count), digest: digest,
            metadata: chosen.contains(.meta) ? metadata : nil)
        payloadBytesSent = 0
        payloadMarks = []
        payloadMarksStart = 0
        endRecordStreamEnd = nil
        headerRecordStreamEnd = nil
        resumeReceived = false
        resumedAt = nil
        centralHolds = 0
        nextRecord = .header
        state = .sending
    }

    /// Multi: after `.acknowledged`, ends the stream: CLOSE `00` ("no more messages") and `EOM`.
    package mutating func finish() throws(SecureSessionError) {
        guard state == .acknowledged, failure == nil, nextRecord == .none, !closeSealed else {
            throw .protocolViolation("the session is finished only after an acknowledged message")
        }
        nextRecord = .close
    }

    /// A value the central wrote (`sequence (2) | piece`, maybe out of order). Errors end the session.
    package mutating func receiveWrite(_ value: [UInt8]) throws(SecureSessionError) -> [Event] {
        if let failure { throw failure }
        do throws(SecureSessionError) {
            var events: [Event] = []
            for piece in try writesReader.accept(value) {
                for frame in try SessionRecords.frames(piece, in: &frames) { events += try handle(frame) }
            }
            return events
        } catch {
            fail(error)
            throw error
        }
    }

    /// Nothing more is sent or read; an acknowledged message stays so (the central holds it).
    private mutating func fail(_ error: SecureSessionError) {
        failure = error
        if state != .acknowledged { state = .failed }
    }

    private mutating func handle(_ frame: Frame) throws(SecureSessionError) -> [Event] {
        switch state {
        case .awaitingHandshake:
            guard frame.type == .handshake, var handshake else {
                throw .protocolViolation("record before the handshake finished")
            }
            defer { self.handshake = handshake }
            do {
                _ = try handshake.readMessage(frame.body)
                let peer = try handshake.authorizeRemote(by: authorizedPeers)
                let message3 = try handshake.writeMessage()
                let keys = try handshake.transportKeys()
                remotePeer = peer
                sealer = keys.sealer
                opener = keys.opener
                writer.append(Frame(type: .handshake, body: message3).encoded)
                state = .sending
                return [.centralAuthenticated(peer)]
            } catch {
                throw SecureSessionError(error)
            }
        case .sending, .awaitingAck:
            return try handleAck(frame).map { [$0] } ?? []
        case .acknowledged where carriesSeveralMessages:
            // Between messages only a CLOSE may come (the central takes no more).
            return try handleAck(frame).map { [$0] } ?? []
        case .acknowledged:
            throw .protocolViolation("write after the message was acknowledged")
        case .closedByCentral:
            throw .protocolViolation("write after the central's CLOSE")
        case .failed:
            throw failure ?? .protocolViolation("session already failed")
        }
    }

    /// An ACK (with `pipeline` the earlier message's first), RESUME, PROGRESS or CLOSE; nil: no event.
    private mutating func handleAck(_ frame: Frame) throws(SecureSessionError) -> Event? {
        let (record, message) = try SessionRecords.open(frame, with: &opener)
        if case .close(let reason) = message, carriesSeveralMessages {
            state = .closedByCentral
            return .closedByCentral(reason: reason)
        }
        if case .progress(let number, let held) = message {
            try handleProgress(message: number, held: held)
            return nil
        }
        if case .resume(let number, let offset) = message {
            // A RESUME for the earlier message came after its END: nothing is left to skip.
            if chosen.contains(.resume), let earlier = unacknowledgedEarlier.first(where: { $0.header.message == number }),
               offset <= earlier.header.payloadLength {
                return nil
            }
            return try handleResume(message: number, offset: offset)
        }
        if case .ack(let ack) = message, let earlier = unacknowledgedEarlier.first {
            // ACKs come in order: this one must be the earliest message's.
            guard ack.message == earlier.header.message else {
                throw .protocolViolation("ACK for message \(ack.message), message \(earlier.header.message) awaits one first")
            }
            guard ack.digest == earlier.header.digest else { throw .protocolViolation("ACK names another SHA-256") }
            if [.stored, .alreadyStored].contains(ack.outcome) { unacknowledgedEarlier.removeFirst() }
            return settle(ack.outcome)
        }
        guard case .ack(let ack) = message, state != .acknowledged else {
            throw .protocolViolation("\(record.kind) record from the central, an ACK expected")
        }
        guard let endRecordStreamEnd, writer.bytesHandedOut >= endRecordStreamEnd else {
            throw .protocolViolation("ACK before the message was sent")
        }
        guard ack.message == header.message else {
            throw .protocolViolation("ACK for message \(ack.message), message \(header.message) was sent")
        }
        guard ack.digest == header.digest else { throw .protocolViolation("ACK names another SHA-256") }
        if [.stored, .alreadyStored].contains(ack.outcome) { state = .acknowledged }
        return settle(ack.outcome)
    }

    /// Outcomes `00`/`01` count an acknowledged message; `02`/`03` end the session undelivered.
    private mutating func settle(_ outcome: SecureAck.Outcome) -> Event {
        switch outcome {
        case .stored, .alreadyStored:
            acknowledgedCount += 1
            return .acknowledged(alreadyStored: outcome == .alreadyStored)
        case .refusedOverLimit, .refusedDigestMismatch:
            state = .failed
            return .refusedByCentral(outcome: outcome.rawValue)
        }
    }

    /// RESUME: only for the message under way, after its HEADER went out, once, within its length.
    private mutating func handleResume(message number: UInt32, offset: UInt64) throws(SecureSessionError) -> Event {
        guard chosen.contains(.resume) else { throw .protocolViolation("RESUME, but resume was not chosen") }
        guard state == .sending || state == .awaitingAck else {
            throw .protocolViolation("RESUME for message \(number) with no message under way")
        }
        guard let headerRecordStreamEnd, writer.bytesHandedOut >= headerRecordStreamEnd else {
            throw .protocolViolation("RESUME before the message's HEADER was sent")
        }
        guard number == header.message else {
            throw .protocolViolation("RESUME for message \(number), message \(header.message) is under way")
        }
        guard offset <= header.payloadLength else {
            throw .protocolViolation("RESUME at offset \(offset), beyond the \(header.payloadLength) bytes of the message")
        }
        guard !resumeReceived else { throw .protocolViolation("RESUME twice for message \(number)") }
        resumeReceived = true
        resumedAt = offset
        centralHolds = max(centralHolds, Int(offset))
        // Records already sealed go out as they are (their nonces are spent); the DATA not yet
        // sealed starts at the held offset when that is further on.
        if case .data(let next) = nextRecord, UInt64(next) < offset {
            nextRecord = offset == header.payloadLength ? .end : .data(offset: Int(offset))
        }
        return .resumed(offset: offset)
    }

    /// PROGRESS (`window`): the central holds the first `held` bytes of message `number`: the one under way after its
    /// HEADER went out (or, with `pipeline`, the one before, all sent), never beyond what was sent or resumed, so the
    /// window cannot widen past bytes the central could have. A smaller report than an earlier one changes nothing.
    private mutating func handleProgress(message number: UInt32, held: UInt64) throws(SecureSessionError) {
        guard chosen.contains(.window) else { throw .protocolViolation("PROGRESS, but window was not chosen") }
        if let earlier = unacknowledgedEarlier.first(where: { $0.header.message == number }) {
            guard held <= earlier.header.payloadLength else {
                throw .protocolViolation("PROGRESS at \(held), beyond the \(earlier.header.payloadLength) bytes of message \(number)")
            }
            return
        }
        guard state == .sending || state == .awaitingAck, number == header.message,
              let headerRecordStreamEnd, writer.bytesHandedOut >= headerRecordStreamEnd else {
            throw .protocolViolation("PROGRESS for message \(number), which is not under way")
        }
        guard held <= UInt64(max(payloadBytesSent, Int(resumedAt ?? 0))) else {
            throw .protocolViolation("PROGRESS at \(held), beyond the \(payloadBytesSent) bytes sent of message \(number)")
        }
        centralHolds = max(centralHolds, Int(held))
    }

    func mayHandOutData(at offset: Int) -> Bool {
        guard chosen.contains(.window) else { return true }
        let end = min(offset + RecordMessage.dataBytesPerRecord, payload.count)
        return end <= centralHolds + FlowWindow.bytes
    }

    /// Seals records until the writer holds over a value's worth, or all are sealed (then flushed).
    private mutating func produceRecords() {
        guard var sealer else { return }
        defer { self.sealer = sealer }
        while nextRecord != .none, !writer.hasFlushPending, writer.pendingCount < writer.pieceLength + 2 {
            let record: RecordMessage
            var payloadEnd: Int?
            switch nextRecord {
            case .header:
                record = .header(header)
                nextRecord = payload.isEmpty ? .end : .data(offset: 0)
            case .data(let offset):
                // At the window's edge what is sealed goes out now, in a shorter value: the
                // central can report holding it only once it has it all.
                guard mayHandOutData(at: offset) else {
                    writer.flush()
                    return
                }
                let end = min(offset + RecordMessage.dataBytesPerRecord, payload.count)
                // Not read yet: the caller reads them (`payloadWanted`) and the records go on.
                guard let bytes = window.bytes(offset..<end, of: payload) else { return }
                record = .data(message: header.message, offset: UInt64(offset), bytes: bytes)
                payloadEnd = end
                nextRecord = end == payload.count ? .end : .data(offset: end)
            case .end:
                record = .end(message: header.message, totalBytes: header.payloadLength)
                // Multi: the stream pauses for the ACK; the caller then chooses what follows.
                nextRecord = carriesSeveralMessages ? .none : .close
            case .close:
                record = .close(reason: 0)
                closeSealed = true
                nextRecord = .none
            case .none:
                return
            }
            do {
                writer.append(try sealer.seal(record.record))
            } catch {
                // 2^64 records or content over 16 KiB: neither happens with 4 KiB DATA records.
                fail(SecureSessionError(error))
                return
            }
            if let payloadEnd, case .data(_, _, let bytes) = record {
                payloadMarks.append((writer.bytesAppended, payloadEnd, bytes.count))
            }
            if case .header = record { headerRecordStreamEnd = writer.bytesAppended }
            if case .end = record {
                endRecordStreamEnd = writer.bytesAppended
                if carriesSeveralMessages {
                    state = .awaitingAck
                    writer.flush()
                }
            }
            if nextRecord == .none { writer.flush() }
        }
    }

    private mutating func notePayloadHandedOut() {
        while payloadMarksStart < payloadMarks.count, payloadMarks[payloadMarksStart].streamEnd <= writer.bytesHandedOut {
            payloadBytesSent = payloadMarks[payloadMarksStart].payloadEnd
            payloadBytesNotified += payloadMarks[payloadMarksStart].bytes
            payloadMarksStart += 1
        }
        if payloadMarksStart > 64 {
            payloadMarks.removeFirst(payloadMarksStart)
            payloadMarksStart = 0
        }
    }

    /// Upper bound of the notification values for `payloadLength`: those up to message 1, those of
    /// message 3 and the records (longest HEADER metadata), each one more for its short end, `EOM`.
    package static func estimatedValueCount(payloadLength: Int, maximumValueLength: Int, overChannel: Bool = false) -> Int {
        let piece = SequencedStream.clampValueLength(maximumValueLength, overChannel: overChannel) - SequencedStream.sequenceLength
        let recordOverhead = Frame.headerLength + 1 + NoiseCipherState.tagLength
        let first = StreamPrefix.encodedLength + Frame.headerLength + NoiseXXHandshake.minimumLength(ofMessage: 0)
        let longestMetadata = 1 + 255 + 8 + 4
        let dataRecords = (max(payloadLength, 0) + RecordMessage.dataBytesPerRecord - 1) / RecordMessage.dataBytesPerRecord
        let second =
            Frame.headerLength + NoiseXXHandshake.minimumLength(ofMessage: 2)
            + recordOverhead + 4 + 8 + 32 + 2 + longestMetadata  // HEADER
            + dataRecords * (recordOverhead + 4 + 8) + max(payloadLength, 0)  // DATA
            + recordOverhead + 4 + 8  // END
            + recordOverhead + 1  // CLOSE
        return (first + piece - 1) / piece + 1 + (second + piece - 1) / piece + 1 + 1
    }
}
