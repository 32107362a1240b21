@testable import Machines
import Testing
import TestSupport
import Transfer
import Trust

/// A `ReceiverVisit` with everything around it simulated, without a bus or a file: a sender
/// (Apple's values, or a `SecureSenderSession` that reads the central's writes and, on each
/// ACK, sends the next message or closes), the sink, the room on disk and the ACK's write.
/// Inputs are the world's (`Step`); each becomes one input of the machine, and its actions are
/// performed on the world.
struct ReceiverWorld {
    struct Setup: Sendable, CustomTestStringConvertible {
        var secure: Bool
        /// Messages the sender has (more than one: a multi session with pipeline).
        var messages: Int
        /// The first message was stored in an earlier visit whose ACK was not confirmed.
        var rememberedFirst = false
        var testDescription: String {
            "\(secure ? "secure" : "compat") messages=\(messages)\(rememberedFirst ? " remembered" : "")"
        }
    }

    enum Step: Sendable, Equatable {
        /// The sender's next value arrives.
        case value
        /// Time passes (600 ms) and the tick arrives.
        case tick
        /// The link ends.
        case ended
        /// The answer to what the visit asked: room (or a refusal), a store (`stored`, found
        /// stored by an earlier run, refused), the ACK written (or failed), the sender's close.
        case roomOK, roomRefused
        case stored, storedBefore, storeRefused
        case acknowledgementWritten, acknowledgementFailed
        case senderClosed(Bool)
        /// Anything else, fed as it is.
        case raw(ReceiverVisit.Input)
    }

    static let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF")
    static let senderIdentity = HostIdentity()
    static let centralIdentity = HostIdentity()
    static let hello = HelloV2(session: 9, offered: [.secure, .multi, .pipeline, .meta])

    static func payload(_ index: Int) -> [UInt8] {
        (0..<(40 + index)).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ index) }
    }

    var visit: ReceiverVisit
    var secureSender: SecureSenderSession?
    var compatSender: MessageSender?
    /// The sender's payloads, in order, and how many it has started.
    let payloads: [[UInt8]]
    var started = 1
    var now: Duration = .zero
    var pendingRoom = false
    var pendingStore: ReceivedMessage?
    /// The shell's place for the secure message under way: its bytes as handed out, and the
    /// sender's payload it must be (by the HEADER's digest).
    var kept: [UInt8] = []
    var keptFor: [UInt8]?
    var pendingCheckpoint = false
    var pendingAcknowledgement: [[UInt8]]?
    var pendingClose = false
    /// What the sink stored, in order; what the sender saw acknowledged.
    var stored: [[UInt8]] = []
    var acknowledgedAtSender = 0
    var finished: TransferFailure??
    var trace: [Step] = []
    /// Every value the visit was given, the sender's and any other, in order.
    var fed: [[UInt8]] = []

    /// Apple's flow: the payload a central must keep is every value fed before the first `EOM`.
    var compatPayloadFed: [UInt8] {
        Array(fed.prefix { $0 != WireFormat.endOfMessage }.joined())
    }

    init(_ setup: Setup) {
        payloads = (0..<setup.messages).map(Self.payload)
        let limits = TransferLimits(maximumMessageSize: 1 << 20)
        if setup.secure {
            let first = payloads[0]
            secureSender = try? SecureSenderSession(
                identity: Self.senderIdentity, authorizedPeers: .anyKey, hello: Self.hello, payload: first,
                digest: OutgoingMessage(payload: first).digest, metadata: nil, maximumValueLength: 182,
                wantsMulti: setup.messages > 1)
        } else {
            compatSender = MessageSender(payload: payloads[0], maximumValueLength: 20)
        }
        let session = setup.secure
            ? SecureReceiverSession(identity: Self.centralIdentity, authorizedPeers: .anyKey, hello: Self.hello,
                                    maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
            : nil
        let assembly = MessageAssembly(limits: limits, idleTimeout: .seconds(5), secure: session)
        let remembered = setup.rememberedFirst
            ? [UnacknowledgedMessage(digest: OutgoingMessage(payload: payloads[0]).digest, storedAt: "/in/earlier")] : []
        visit = ReceiverVisit(facts: .init(peer: Self.peer, overChannel: false, offeredAsCommand: false, commandAllowed: true,
                                           messageCount: nil, receivedBefore: 0),
                              assembly: assembly, remembered: remembered)
    }

    /// Makes `step` happen; the machine's input and actions (nil: the step does not apply now).
    mutating func take(_ step: Step) -> (input: ReceiverVisit.Input, actions: [ReceiverVisit.Action])? {
        guard let input = input(for: step) else { return nil }
        if case .transfer(.value(let value)) = input { fed.append(value) }
        let actions = visit.handle(input, at: now)
        trace.append(step)
        apply(actions)
        return (input, actions)
    }

    private mutating func nextValue() -> [UInt8]? {
        if var sender = secureSender {
            defer { secureSender = sender }
            return sender.nextValue()
        }
        if var sender = compatSender {
            defer { compatSender = sender }
            return sender.nextValue()
        }
        return nil
    }

    private mutating func input(for step: Step) -> ReceiverVisit.Input? {
        now += .milliseconds(20)
        // As the shell does: nothing more is read while the visit waits for an answer.
        if visit.pending != nil {
            switch step {
            case .value, .tick, .ended: return nil
            case .raw(.transfer): return nil
            default: break
            }
        }
        switch step {
        case .value:
            return nextValue().map { .transfer(.value($0)) }
        case .tick:
            now += .milliseconds(600)
            return .transfer(.tick)
        case .ended:
            return .transfer(.ended("the peripheral disconnected"))
        case .roomOK, .roomRefused:
            guard pendingRoom else { return nil }
            pendingRoom = false
            return .room(step == .roomOK ? nil : .init(bound: "reserve", reason: "the disk is full"))
        case .stored, .storedBefore, .storeRefused:
            guard let message = pendingStore else { return nil }
            pendingStore = nil
            switch step {
            case .stored:
                stored.append(message.payload)
                return .stored(.stored(sequence: stored.count, at: "/in/\(stored.count)"))
            case .storedBefore:
                return .stored(.storedBefore(at: "/in/before"))
            default:
                return .stored(.refused("no room"))
            }
        case .acknowledgementWritten, .acknowledgementFailed:
            guard let values = pendingAcknowledgement else { return nil }
            pendingAcknowledgement = nil
            guard step == .acknowledgementWritten else { return .acknowledgementWritten(failure: "the link went away") }
            for value in values { senderReads(value) }
            return .acknowledgementWritten(failure: nil)
        case .senderClosed(let closed):
            guard pendingClose else { return nil }
            pendingClose = false
            return .senderClosed(closed)
        case .raw(let input):
            if case .checkpointHeld = input { pendingCheckpoint = false }
            return input
        }
    }

    /// The sender reads the central's write: the handshake goes on; on an ACK the next message
    /// starts, or the stream closes.
    private mutating func senderReads(_ value: [UInt8]) {
        guard var sender = secureSender else { return }
        defer { secureSender = sender }
        guard let events = try? sender.receiveWrite(value),
              events.contains(where: { if case .acknowledged = $0 { true } else { false } }) else { return }
        acknowledgedAtSender += 1
        guard sender.carriesSeveralMessages else { return }
        if started < payloads.count {
            let next = payloads[started]
            started += 1
            try? sender.sendNext(payload: next, digest: OutgoingMessage(payload: next).digest, metadata: nil)
        } else {
            try? sender.finish()
        }
    }

    private mutating func apply(_ actions: [ReceiverVisit.Action]) {
        for action in actions {
            switch action {
            case .write(let value, _): senderReads(value)
            case .checkRoom: pendingRoom = true
            case .store(var message, _):
                if message.format == .secure { message.body = MessagePayload(kept) }
                pendingStore = message
            case .keepPayload(.begin(let header)):
                kept = []
                keptFor = payloads.first { OutgoingMessage(payload: $0).digest == header.digest }
            case .keepPayload(.write(let offset, let bytes)):
                kept.replaceSubrange(min(offset, kept.count)..<min(kept.count, offset + bytes.count), with: bytes)
            case .lookUpCheckpoint: pendingCheckpoint = true
            case .writeAcknowledgement(let values, _, _): pendingAcknowledgement = values
            case .awaitSenderClose: pendingClose = true
            case .finish(let failure): finished = .some(failure)
            default: break
            }
        }
    }

    var possibleSteps: [Step] {
        [.value, .tick, .ended, .roomOK, .roomRefused, .stored, .storedBefore, .storeRefused, .acknowledgementWritten,
         .acknowledgementFailed, .senderClosed(true), .senderClosed(false)] + Self.rawInputs.map(Step.raw)
    }

    static let rawInputs: [ReceiverVisit.Input] = [
        .room(nil), .stored(.stored(sequence: 99, at: nil)), .acknowledgementWritten(failure: nil), .senderClosed(true),
        .writeFailed("EIO"), .transfer(.value([0x45, 0x4F, 0x4D])), .transfer(.value([0x00, 0x07, 0x01, 0x02])),
    ]

    /// A healthy world's next step: values flow, everything asked is answered well.
    var healthyStep: Step? {
        if pendingRoom { return .roomOK }
        if pendingStore != nil { return .stored }
        if pendingCheckpoint { return .raw(.checkpointHeld(bytes: 0, digest: nil)) }
        if pendingAcknowledgement != nil { return .acknowledgementWritten }
        if pendingClose { return .senderClosed(true) }
        return .value
    }

    var fingerprint: String {
        let v = visit
        var parts = ["\(v.isOver)", "\(String(describing: v.pending).prefix(30))", "\(v.remembered.count)",
                     "\(v.unconfirmed.pending.count)", "\(v.awaitingClose.count)", "\(v.received)", "\(v.storedDigests.count)",
                     "\(v.assembly.bytesReceived)", "\(v.assembly.valuesReceived)", "\(v.assembly.finished)",
                     "\(v.assembly.currentMessageNumber ?? 99)", "\(v.assembly.senderClosed)"]
        parts += ["\(pendingRoom)", "\(pendingStore != nil)", "\(pendingAcknowledgement != nil)", "\(pendingClose)",
                  "\(stored.count)", "\(acknowledgedAtSender)", "\(started)",
                  "\(secureSender?.state == nil ? "-" : "\(secureSender!.state)")",
                  "\(secureSender?.endOfMessageSent ?? compatSender?.isFinished ?? false)",
                  "\(secureSender?.payloadBytesSent ?? compatSender?.bytesSent ?? 0)", "\(now > .seconds(5))"]
        return parts.joined(separator: "|")
    }
}
