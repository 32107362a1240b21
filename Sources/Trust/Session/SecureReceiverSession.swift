// The fuzz harness (scripts/fuzz/trust) compiles Trust as one module with Transfer's
// MessagePayload.swift in it, where there is no Transfer module to import.
#if canImport(Transfer)
import Transfer
#endif
import Crypto

/// Central side (Noise responder) of one version-2 secure session carrying one message, or with `multi` several in
/// turn (docs/wire-v2.md, sections 2 to 5).
///
/// Reads the notifications (prefix, message 1, message 3, sealed records, `EOM`) and writes its own stream (message
/// 2, later the sealed ACK), both as sequence-numbered values. The sender's key is checked against the authorized
/// peers before any record is opened; every length a peer controls is bounded (frames by `FrameReader`, reordering by
/// the window, the message by `maximumPayloadLength`, DATA by the announced length). It holds none of the payload:
/// DATA's new bytes are handed out (`.appended`) for the caller to keep, the SHA-256 taken as they pass.
///
/// `multi`: each message is reported (`.complete`) as its END verifies, and must be acknowledged before the next
/// HEADER; the sender ends with CLOSE `00` and `EOM`, this side earlier with `close(reason:)` (CLOSE `01`: it takes
/// no more). `resume`: each HEADER asks for a checkpoint of the same sender, digest and length (`.checkpointWanted`);
/// the caller, holding one, puts its bytes where the message's go and calls `resume(heldBytes:digest:)`, which writes
/// a sealed RESUME. DATA below it is skipped; the SHA-256 over held + new bytes still decides, and a resumed message
/// failing it is refused with ACK `03` so the sender knows the checkpoint was bad. `window`: it writes PROGRESS each
/// time what it holds grew by `FlowWindow.reportInterval`.
///
/// A prefix without `secure` is refused (`.notSecure`). A central without an identity runs with a key made for the
/// run; `AuthorizedPeers.anyKey` accepts any key (encrypted, not authenticated).
package struct SecureReceiverSession: Sendable {
    package enum Event: Sendable, Equatable {
        /// A value to write to the characteristic, in order.
        case write([UInt8])
        /// A PROGRESS value, in order with `.write`; nothing awaits a reply: may be a write command.
        case progressWrite([UInt8])
        case senderAuthenticated(AuthorizedPeers.Peer)
        /// The announced message (its length is within `maximumPayloadLength`).
        case header(MessageHeader)
        case progress(bytesReceived: Int)
        /// END verified: length and SHA-256 of the bytes handed out (and a checkpoint's) match.
        case complete(header: MessageHeader)
        /// The sender's CLOSE: no more messages in this session.
        case closed(reason: UInt8)
        /// The bare `EOM` value, once every value before it arrived.
        case endOfStream
        /// Resume: the caller holds a checkpoint of `offset` bytes; a RESUME was written.
        case resumed(offset: Int)
        /// Resume: the caller may hold a checkpoint of this message (`resume(heldBytes:digest:)`).
        case checkpointWanted(MessageHeader)
        /// New payload bytes at `offset` (skipped ones not repeated), for the caller to keep.
        case appended(offset: Int, bytes: [UInt8])
        /// Resume: a resumed message failed its SHA-256 or length; the ACK `03` is in the `.write`
        /// events before this one. The session is over (later calls throw).
        case refusedDigestMismatch(MessageHeader)
    }

    private enum Phase: Sendable, Equatable {
        case awaitingPrefix, awaitingMessage1, awaitingMessage3, awaitingHeader, receivingData, awaitingClose, closed
    }

    package private(set) var remotePeer: AuthorizedPeers.Peer?

    private let trust: (identity: HostIdentity, authorizedPeers: AuthorizedPeers)
    private let hello: HelloV2
    private let maximumPayloadLength: Int
    private var phase = Phase.awaitingPrefix
    private var notifications = SequencedStreamReader()
    private var prefixBytes: [UInt8] = []
    private var frames = FrameReader()
    private var handshake: NoiseXXHandshake?
    /// What the prefix chose; `.meta` allows metadata in the HEADER.
    private var chosen: Capabilities = []
    /// The number the next HEADER must carry (one more per message in a multi session).
    private var expectedMessage: UInt32 = 0
    /// This side wrote CLOSE: it reads nothing more.
    private var closedByUs = false
    private var opener: RecordOpener?
    private var sealer: RecordSealer?
    private var writer: SequencedStreamWriter
    private var header: MessageHeader?
    /// The message under way: bytes handed out (or held by a checkpoint), and their SHA-256 so far.
    private var received = 0
    private var digest = RunningDigest()
    /// Verified, unacknowledged messages, oldest first: one at most, two with `pipeline`.
    private var pendingAcks: [MessageHeader] = []
    private var endOfMessageSeen = false
    private var endOfStreamReported = false
    private var failure: SecureSessionError?
    /// Resume: the offset the next DATA must carry (it may jump once, forward to `resumeOffset`).
    private var senderNextOffset = 0
    private var resumeOffset: Int?
    /// `window`: what the last PROGRESS (or RESUME) of the message under way said this side holds.
    private var reportedHeld = 0

    /// - Parameters:
    ///   - hello: the HELLO v2 this central wrote (it offers `secure`).
    ///   - maximumPayloadLength: a HEADER announcing more is refused (`.tooLarge`) before DATA.
    ///   - maximumWriteLength: ATT MTU − 3 for our writes (brought within 20...512).
    package init(
        identity: HostIdentity, authorizedPeers: AuthorizedPeers, hello: HelloV2,
        maximumPayloadLength: Int, maximumWriteLength: Int
    ) {
        trust = (identity: identity, authorizedPeers: authorizedPeers)
        self.hello = hello
        self.maximumPayloadLength = max(maximumPayloadLength, 0)
        // A HELLO offering `channel` was written on an L2CAP channel: long values, in order.
        let overChannel = hello.offered.contains(.channel)
        writer = SequencedStreamWriter(maximumValueLength: maximumWriteLength, overChannel: overChannel)
        notifications = SequencedStreamReader(overChannel: overChannel)
    }

    /// This session runs over an L2CAP channel (its HELLO offered `channel`).
    package var overChannel: Bool { hello.offered.contains(.channel) }
    /// The sender chose `multi`: several messages may follow in this session.
    package var carriesSeveralMessages: Bool { chosen.contains(.multi) }
    /// The sender chose `pipeline` (with `multi`): its next HEADER may come before our last ACK.
    package var pipelines: Bool { chosen.contains(.pipeline) && carriesSeveralMessages }
    /// The sender chose the secure mode (false before the prefix arrived).
    package var isSecure: Bool { chosen.contains(.secure) }
    /// The stream's prefix arrived: `isSecure` and `carriesSeveralMessages` are known.
    package var hasReadPrefix: Bool { phase != .awaitingPrefix }
    package var offersSecure: Bool { hello.offered.contains(.secure) }
    package private(set) var completedCount = 0

    /// A first notification value starts a version-2 stream: sequence 0, prefix magic, version 2.
    package static func startsVersion2Stream(_ value: [UInt8]) -> Bool {
        let magic = StreamPrefix.magic
        let start = SequencedStream.sequenceLength
        return value.count > start + magic.count && value[0] == 0 && value[1] == 0
            && value[start..<(start + magic.count)].elementsEqual(magic)
            && value[start + magic.count] == HelloV2.version
    }

    /// One notification value. Any error ends the session; nothing of the message may be kept.
    package mutating func receiveNotification(_ value: [UInt8]) throws(SecureSessionError) -> [Event] {
        if let failure { throw failure }
        // After our CLOSE the rest of the stream is of no interest (the sender stops).
        if closedByUs { return [] }
        do throws(SecureSessionError) {
            guard !endOfStreamReported else { throw .protocolViolation("value after the end of the stream") }
            if value == SequencedStream.endOfMessage {
                guard !endOfMessageSeen else { throw .protocolViolation("EOM received twice") }
                endOfMessageSeen = true
                return endOfStreamIfDone()
            }
            var events: [Event] = []
            for piece in try notifications.accept(value) {
                // A refused resumed message ended the session: what follows is not read.
                if failure != nil { return events }
                events += try consume(piece)
            }
            if failure != nil { return events }
            return events + endOfStreamIfDone()
        } catch {
            fail(error)
            throw error
        }
    }

    /// After `.complete`, once the caller stored the payload (or refused it): the write values of the sealed ACK
    /// (`outcome`: `00` stored, `01` already stored, `02` refused by a limit). `closingWith` (multi only): a sealed
    /// CLOSE with that reason follows in the same writes (no round trip more), and nothing is read after it.
    package mutating func acknowledgement(outcome: UInt8, closingWith closeReason: UInt8? = nil)
        throws(SecureSessionError) -> [[UInt8]] {
        if let failure { throw failure }
        guard !closedByUs else { throw .protocolViolation("acknowledgement after this side's CLOSE") }
        guard let header = pendingAcks.first, sealer != nil else {
            throw .protocolViolation("acknowledgement without a complete message awaiting one")
        }
        guard let verdict = SecureAck.Outcome(rawValue: outcome), verdict != .refusedDigestMismatch else {
            throw .protocolViolation("ACK outcome \(outcome) is not 00, 01 or 02")
        }
        guard closeReason == nil || carriesSeveralMessages else {
            throw .protocolViolation("CLOSE from the central in a session without multi")
        }
        let ack = RecordMessage.ack(SecureAck(message: header.message, digest: header.digest, outcome: verdict))
        let writes = try sealAndDrain(closeReason.map { [ack, .close(reason: $0)] } ?? [ack])
        pendingAcks.removeFirst()
        if closeReason != nil { closedByUs = true }
        return writes
    }

    /// Multi, after acknowledging the last message it takes: the write values of a sealed CLOSE
    /// (`01`: this side takes no more). Nothing is read after it.
    package mutating func close(reason: UInt8) throws(SecureSessionError) -> [[UInt8]] {
        if let failure { throw failure }
        guard carriesSeveralMessages, completedCount > 0, pendingAcks.isEmpty, sealer != nil else {
            throw .protocolViolation("CLOSE only after an acknowledged message of a multi session")
        }
        let writes = try sealAndDrain([.close(reason: reason)])
        closedByUs = true
        return writes
    }

    private mutating func fail(_ error: SecureSessionError) {
        failure = error
        received = 0
    }

    private mutating func endOfStreamIfDone() -> [Event] {
        guard endOfMessageSeen, phase == .closed, notifications.heldCount == 0, !endOfStreamReported else { return [] }
        endOfStreamReported = true
        return [.endOfStream]
    }

    /// Stream bytes in order: the prefix first, frames after it.
    private mutating func consume(_ piece: ArraySlice<UInt8>) throws(SecureSessionError) -> [Event] {
        var rest = piece
        var events: [Event] = []
        if phase == .awaitingPrefix {
            let taken = rest.prefix(StreamPrefix.encodedLength - prefixBytes.count)
            prefixBytes += taken
            rest = rest.dropFirst(taken.count)
            guard prefixBytes.count == StreamPrefix.encodedLength else { return [] }
            let prefix: StreamPrefix
            do {
                prefix = try StreamPrefix(parsing: prefixBytes, hello: hello)
            } catch {
                throw .protocolViolation(error.description)
            }
            // Over an L2CAP channel both sides know it: a sender that does not say so is not the one it was opened to.
            guard prefix.chosen.contains(.channel) == overChannel else {
                throw .protocolViolation(overChannel ? "the sender did not choose the channel it was reached on"
                                                     : "the sender chose a channel over GATT")
            }
            chosen = prefix.chosen
            // `secure` is always offered: a sender not choosing it is not one this version talks to (retired plain).
            guard prefix.chosen.contains(.secure) else { throw .notSecure }
            handshake = NoiseXXHandshake(
                role: .responder, staticKey: trust.identity.privateKey,
                prologue: StreamPrefix.prologue(hello: hello, prefix: prefix))
            phase = .awaitingMessage1
        }
        guard !rest.isEmpty else { return events }
        for frame in try SessionRecords.frames(rest, in: &frames) where failure == nil { events += try handle(frame) }
        return events
    }

    private mutating func handle(_ frame: Frame) throws(SecureSessionError) -> [Event] {
        switch phase {
        case .awaitingPrefix:
            throw .protocolViolation("frame before the stream prefix")
        case .awaitingMessage1, .awaitingMessage3:
            guard frame.type == .handshake, var handshake else {
                throw .protocolViolation("record before the handshake finished")
            }
            defer { self.handshake = handshake }
            do {
                _ = try handshake.readMessage(frame.body)
                if phase == .awaitingMessage1 {
                    writer.append(Frame(type: .handshake, body: try handshake.writeMessage()).encoded)
                    writer.flush()
                    phase = .awaitingMessage3
                    return writer.drain().map(Event.write)
                }
                let peer = try handshake.authorizeRemote(by: trust.authorizedPeers)
                let keys = try handshake.transportKeys()
                remotePeer = peer
                opener = keys.opener
                sealer = keys.sealer
                phase = .awaitingHeader
                return [.senderAuthenticated(peer)]
            } catch {
                throw SecureSessionError(error)
            }
        case .awaitingHeader, .receivingData, .awaitingClose:
            return try handle(try SessionRecords.open(frame, with: &opener).message)
        case .closed:
            throw .protocolViolation("record after CLOSE")
        }
    }

    /// The write values of `records`, sealed in this session's order and flushed: what this side writes at once.
    mutating func sealAndDrain(_ records: [RecordMessage]) throws(SecureSessionError) -> [[UInt8]] {
        guard var sealer else { throw .protocolViolation("\(records[0].record.kind) before the handshake finished") }
        do {
            for record in records { writer.append(try sealer.seal(record.record)) }
        } catch {
            throw SecureSessionError(error)
        }
        self.sealer = sealer
        writer.flush()
        return writer.drain()
    }

    /// Resume: the caller holds the message's first `heldBytes` bytes (a checkpoint, already where
    /// its bytes go) and `digest`, their SHA-256 state. A sealed RESUME goes out at once; DATA below
    /// it is skipped. Nothing when the message already got that far, or none is under way.
    package mutating func resume(heldBytes: Int, digest held: RunningDigest) throws(SecureSessionError) -> [Event] {
        if let failure { throw failure }
        guard phase == .receivingData, let header, chosen.contains(.resume), resumeOffset == nil,
              heldBytes > received, UInt64(heldBytes) <= header.payloadLength else { return [] }
        do throws(SecureSessionError) {
            let writes = try sealAndDrain([.resume(message: header.message, offset: UInt64(heldBytes))])
            received = heldBytes
            digest = held
            resumeOffset = heldBytes
            reportedHeld = heldBytes
            return writes.map(Event.write) + [.resumed(offset: heldBytes), .progress(bytesReceived: heldBytes)]
        } catch {
            fail(error)
            throw error
        }
    }

    /// `window`: a sealed PROGRESS saying this side holds the message's first `received` bytes.
    private mutating func reportProgress(of header: MessageHeader) throws(SecureSessionError) -> [Event] {
        let writes = try sealAndDrain([.progress(message: header.message, held: UInt64(received))])
        reportedHeld = received
        return writes.map(Event.progressWrite)
    }

    /// A resumed message failed verification: the checkpoint was bad (a changed file under the
    /// same digest SHA-256 rules out). ACK `03` tells the sender; the session ends as for any mismatch.
    private mutating func refuseResumedMessage(_ header: MessageHeader) throws(SecureSessionError) -> [Event] {
        // ACKs go in order: with an earlier message still unacknowledged (pipeline), an ACK
        // `03` for this one would come first; the session just ends, as for any mismatch.
        guard pendingAcks.isEmpty, sealer != nil else { throw .digestMismatch }
        let ack = SecureAck(message: header.message, digest: header.digest, outcome: .refusedDigestMismatch)
        let writes = try sealAndDrain([.ack(ack)])
        fail(.digestMismatch)
        phase = .closed
        return writes.map(Event.write) + [.refusedDigestMismatch(header)]
    }

    private mutating func handle(_ message: RecordMessage) throws(SecureSessionError) -> [Event] {
        switch (phase, message) {
        case (.awaitingHeader, .header(let announced)):
            return try begin(announced)
        case (.receivingData, .data(let number, let offset, let bytes)):
            return try take(message: number, offset: offset, bytes: bytes)
        case (.receivingData, .end(let number, let totalBytes)):
            return try end(message: number, totalBytes: totalBytes)
        case (.awaitingClose, .close(let reason)):
            phase = .closed
            return [.closed(reason: reason)]
        case (.awaitingHeader, .close(let reason)) where carriesSeveralMessages && completedCount > 0:
            guard pendingAcks.isEmpty else {
                throw .protocolViolation("CLOSE before message \(pendingAcks[0].message) was acknowledged")
            }
            phase = .closed
            return [.closed(reason: reason)]
        case (_, .close(let reason)):
            throw .protocolViolation("CLOSE (reason \(reason)) before the message was complete")
        default:
            throw .protocolViolation("\(message.record.kind) record out of place")
        }
    }

    /// A HEADER, checked against the bounds; with `resume` the caller is asked for a checkpoint.
    private mutating func begin(_ announced: MessageHeader) throws(SecureSessionError) -> [Event] {
        guard announced.message == expectedMessage else {
            throw .protocolViolation("HEADER of message \(announced.message), message \(expectedMessage) expected")
        }
        // Stop-and-wait: the sender starts a message only after the last one's ACK; with
        // `pipeline` only while fewer than `PipelineWindow.messages` await their ACKs.
        guard pendingAcks.count <= (pipelines ? PipelineWindow.messages - 1 : 0) else {
            throw .protocolViolation("HEADER of message \(announced.message) before message \(pendingAcks[0].message) was acknowledged")
        }
        guard announced.payloadLength <= UInt64(maximumPayloadLength) else {
            throw .tooLarge(announced: announced.payloadLength, limit: maximumPayloadLength)
        }
        guard announced.metadata == nil || chosen.contains(.meta) else {
            throw .protocolViolation("HEADER with file metadata, but meta was not chosen")
        }
        header = announced
        senderNextOffset = 0
        resumeOffset = nil
        reportedHeld = 0
        received = 0
        digest = RunningDigest()
        phase = .receivingData
        // Checkpoints are keyed by the authenticated sender.
        if chosen.contains(.resume), remotePeer != nil { return [.header(announced), .checkpointWanted(announced)] }
        return [.header(announced)]
    }

    /// DATA: new bytes handed out in order; contiguous but for one jump forward to the RESUME offset.
    private mutating func take(message number: UInt32, offset: UInt64, bytes: [UInt8]) throws(SecureSessionError) -> [Event] {
        guard let header, number == header.message else {
            throw .protocolViolation("DATA of message \(number), message \(header?.message ?? 0) expected")
        }
        let jumpsToResume = resumeOffset.map { $0 > senderNextOffset && offset == UInt64($0) } ?? false
        guard offset == UInt64(senderNextOffset) || jumpsToResume else {
            throw .protocolViolation("DATA at offset \(offset), \(senderNextOffset) expected")
        }
        guard UInt64(bytes.count) <= header.payloadLength - offset else {
            throw .protocolViolation("DATA beyond the announced \(header.payloadLength) bytes")
        }
        senderNextOffset = Int(offset) + bytes.count
        // Bytes below what is held (a checkpoint) were sent before the RESUME was read.
        let skip = max(0, received - Int(offset))
        guard skip < bytes.count else { return [] }
        let fresh = Array(bytes[skip...])
        let appendedAt = received
        digest.update(fresh)
        received += fresh.count
        var events: [Event] = [.appended(offset: appendedAt, bytes: fresh), .progress(bytesReceived: received)]
        // After `.appended`: the caller keeps the bytes before it writes that it holds them.
        // Not once the message is all here: its ACK follows.
        if chosen.contains(.window), received - reportedHeld >= FlowWindow.reportInterval,
           UInt64(received) < header.payloadLength {
            events += try reportProgress(of: header)
        }
        return events
    }

    /// END: the length and SHA-256 of what was handed out must match the HEADER.
    private mutating func end(message number: UInt32, totalBytes: UInt64) throws(SecureSessionError) -> [Event] {
        guard let header, number == header.message else {
            throw .protocolViolation("END of message \(number), message \(header?.message ?? 0) expected")
        }
        guard totalBytes == header.payloadLength, UInt64(received) == totalBytes, digest.digest == header.digest else {
            guard resumeOffset != nil else { throw .digestMismatch }
            return try refuseResumedMessage(header)
        }
        pendingAcks.append(header)
        completedCount += 1
        // Multi: the next HEADER or the CLOSE may follow (after our ACK).
        if carriesSeveralMessages {
            phase = .awaitingHeader
            expectedMessage = number &+ 1
        } else {
            phase = .awaitingClose
        }
        received = 0
        return [.complete(header: header)]
    }
}
