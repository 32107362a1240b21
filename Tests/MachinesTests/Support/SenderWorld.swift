@testable import Machines
import Testing
import TestSupport
import Transfer
import Trust

/// A `SenderConnection` with everything around it simulated, without a bus or a file: the link
/// (one value in flight, a drain), a central (Apple's: it keeps the values; ours: a
/// `SecureReceiverSession` that answers the handshake and acknowledges each message it
/// verifies), the message source and the timers. Inputs are the world's (`Step`): each becomes
/// one input of the machine, and the actions it returns are performed on the world.
struct SenderWorld {
    /// The kinds of connection the tests try.
    struct Setup: Sendable, CustomTestStringConvertible {
        var secure: Bool
        var indications: Bool
        /// The source has this many messages after the first (a multi session with pipeline).
        var followers: Int
        var payloadLength: Int = 30
        var testDescription: String {
            "\(secure ? "secure" : "compat") indications=\(indications) followers=\(followers)"
        }
    }

    /// What a test can make happen next.
    enum Step: Sendable, Hashable, CustomStringConvertible {
        /// The link takes the value in flight and the central receives it.
        case linkTakes
        /// The link takes the value in flight, and it is lost on the way.
        case linkLoses
        /// The central confirms the indication it received last.
        case confirm
        /// The central's next write reaches the sender.
        case centralWrites
        /// The timer of this kind fires (the generation armed now).
        case fire(SenderConnection.TimerKind)
        /// A timer that was cancelled or restarted fires late.
        case fireStale(SenderConnection.TimerKind)
        /// The source answers the request it was given (`serve`: with its next message).
        case answer(serve: Bool)
        /// Anything else, fed as it is (whether or not it fits the state).
        case raw(SenderConnection.Input)

        var description: String {
            switch self {
            case .linkTakes: "linkTakes"
            case .linkLoses: "linkLoses"
            case .confirm: "confirm"
            case .centralWrites: "centralWrites"
            case .fire(let kind): "fire(\(kind))"
            case .fireStale(let kind): "fireStale(\(kind))"
            case .answer(let serve): "answer(serve: \(serve))"
            case .raw(let input): "raw(\(String(describing: input).prefix(60)))"
            }
        }
    }

    static let limits = SubscriptionDelivery.Limits(
        acknowledgementTimeout: .seconds(20), unsubscribeTimeout: .seconds(30), acknowledgementGrace: .seconds(3),
        compatConfirmationDelay: .seconds(1))
    static let settings = SenderConnection.Settings(
        delivery: limits, deadline: TransferDeadline(minimumRate: 256, floor: .seconds(60)),
        handshakeTimeout: .seconds(10), progressInterval: .milliseconds(200), sessionMessageLimit: 8,
        sessionByteLimit: 1 << 20)
    static let peer = PeerDescription(address: "11:22:33:44:55:66")
    static let senderIdentity = HostIdentity()
    static let centralIdentity = HostIdentity()
    static let hello = HelloV2(session: 7, offered: [.secure, .multi, .pipeline, .meta])

    static func message(_ index: Int, length: Int) -> OutgoingMessage {
        OutgoingMessage(payload: (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) })
    }

    var machine: SenderConnection
    var central: SecureReceiverSession?
    /// Values the central received, in order (Apple's central keeps them all).
    var received: [[UInt8]] = []
    /// The central's writes not yet delivered, each with the digest it acknowledges.
    var pendingWrites: [(value: [UInt8], acknowledges: [UInt8]?)] = []
    /// Messages the central verified, by digest, and the digests whose ACK reached the sender.
    var verified: Set<[UInt8]> = []
    var acknowledgementsFed: Set<[UInt8]> = []
    var inFlight: [UInt8]?
    var draining = false
    var pendingRequest: SenderConnection.SourceRequest?
    var pendingCheck = false
    var queue: [OutgoingMessage]
    var nextSequence = 2
    var stale: [SenderConnection.TimerKind: SenderConnection.TimerID] = [:]
    var delivered: [Int] = []
    var drainedEndOfMessage = false
    var ended: Bool?
    var now: Duration = .zero
    /// The steps taken, for messages.
    var trace: [Step] = []

    init(_ setup: Setup) {
        let first = Self.message(0, length: setup.payloadLength)
        queue = (1...max(1, setup.followers)).map { Self.message($0, length: setup.payloadLength) }
        if setup.followers == 0 { queue = [] }
        var settings = Self.settings
        if setup.followers == 0 { settings.sessionMessageLimit = 1 }
        let started = SenderConnection.start(
            peer: Self.peer, offer: .init(first, sequence: 1), hello: setup.secure ? .version2(Self.hello) : .none,
            link: .init(valueLength: 182, overChannel: false, indications: setup.indications),
            keys: .init(identity: Self.senderIdentity, authorizedPeers: .anyKey, requiresSecure: false),
            settings: settings, reorderRisk: nil)
        guard case .started(let machine, let actions) = started else { fatalError("not started: \(started)") }
        self.machine = machine
        if setup.secure {
            central = SecureReceiverSession(identity: Self.centralIdentity, authorizedPeers: .anyKey, hello: Self.hello,
                                            maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        }
        apply(actions)
    }

    /// Makes `step` happen; returns the machine's input and the actions it gave back (nil:
    /// the step does not apply now).
    mutating func take(_ step: Step) -> (input: SenderConnection.Input, actions: [SenderConnection.Action])? {
        guard let input = input(for: step) else { return nil }
        now += .milliseconds(50)
        let actions = machine.handle(input, at: now)
        trace.append(step)
        apply(actions)
        return (input, actions)
    }

    private mutating func input(for step: Step) -> SenderConnection.Input? {
        switch step {
        case .linkTakes, .linkLoses:
            guard let value = inFlight else { return nil }
            inFlight = nil
            if step == .linkTakes { deliverToCentral(value) }
            return .sent
        case .confirm:
            return .confirmed
        case .centralWrites:
            guard !pendingWrites.isEmpty else { return nil }
            let write = pendingWrites.removeFirst()
            if let digest = write.acknowledges { acknowledgementsFed.insert(digest) }
            return .written(write.value)
        case .fire(let kind):
            guard let generation = machine.armed[kind] else { return nil }
            stale[kind] = .init(kind: kind, generation: generation)
            return .timerFired(.init(kind: kind, generation: generation))
        case .fireStale(let kind):
            guard let timer = stale[kind], machine.armed[kind] != timer.generation else { return nil }
            return .timerFired(timer)
        case .answer(let serve):
            guard let request = pendingRequest else { return nil }
            pendingRequest = nil
            switch request {
            case .nextAvailable:
                guard serve, !queue.isEmpty else { return .nextMessage(nil) }
                nextSequence += 1
                return .nextMessage(.init(queue.removeFirst(), sequence: nextSequence - 1))
            case .upcoming(let skipping):
                // Claimed, not taken: the source gives it again as its next one once counted.
                return .upcoming(serve && queue.count > skipping ? queue[skipping] : nil)
            case .prepare:
                return nil
            }
        case .raw(let input):
            switch input {
            case .sent, .sendFailed: inFlight = nil
            default: break
            }
            if case .drained = input {
                guard draining else { return input }
                draining = false
                drainedEndOfMessage = true
            }
            if case .bluetoothChecked = input { pendingCheck = false }
            return input
        }
    }

    /// The central reads a value the link took.
    private mutating func deliverToCentral(_ value: [UInt8]) {
        received.append(value)
        guard var session = central else { return }
        defer { central = session }
        guard let events = try? session.receiveNotification(value) else { return }
        for event in events {
            switch event {
            case .write(let write), .progressWrite(let write):
                pendingWrites.append((write, nil))
            case .complete(let header):
                verified.insert(header.digest)
                for write in (try? session.acknowledgement(outcome: 0)) ?? [] {
                    pendingWrites.append((write, header.digest))
                }
            default:
                break
            }
        }
    }

    private mutating func apply(_ actions: [SenderConnection.Action]) {
        for action in actions {
            switch action {
            case .send(let value): inFlight = value
            case .drain: draining = true
            case .ask(.prepare): break
            case .ask(let request): pendingRequest = request
            case .checkBluetooth: pendingCheck = true
            case .deliver(let offer, _, _): delivered.append(offer.sequence)
            case .end(let announce): ended = announce
            case .cancelTimer(let timer): stale[timer.kind] = timer
            default: break
            }
        }
    }

    /// Every step that may apply now, the alphabet of the exploration.
    var possibleSteps: [Step] {
        var steps: [Step] = [.linkTakes, .linkLoses, .confirm, .centralWrites, .answer(serve: true), .answer(serve: false)]
        steps += SenderConnection.TimerKind.allCases.flatMap { [Step.fire($0), .fireStale($0)] }
        steps += Self.rawInputs.map(Step.raw)
        return steps
    }

    static let rawInputs: [SenderConnection.Input] = [
        .sent, .drained, .confirmed, .sendFailed(.closedByPeer), .sendFailed(.stoppedByUs), .sendFailed(.other("EIO")),
        .written([0x00, 0x05, 0x01]),
        .hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil),
        .hungUp(reason: "the central disconnected", drainedWhenClosed: true),
        .hungUp(reason: "the central disconnected", drainedWhenClosed: false),
        .nextMessage(nil), .upcoming(nil),
        .bluetoothChecked(up: true, reorderRisk: nil), .bluetoothChecked(up: false, reorderRisk: "2 bearers"),
        .centralTurnedAway, .shutDown(reason: "off"),
    ]

    /// What makes two worlds the same for the exploration: the machine's and the central's
    /// progress, not their keys.
    var fingerprint: String {
        let m = machine
        var parts = ["\(m.transfer)", "\(m.unconfirmed)", "\(m.confirmationsFinished)", "\(m.isOver)",
                     "\(m.delivery)", "\(m.armed.keys.sorted { "\($0)" < "\($1)" })", "\(m.heldWrites.count)",
                     "\(m.heldEvents)", "\(m.awaiting.map { "\($0)".prefix(40) } ?? "-")", "\(m.current.sequence)",
                     "\(m.pipeline.sentAhead.map(\.number))", "\(m.pipeline.endWritten ?? 99)",
                     "\(m.pipeline.acknowledgedBeforeEndOfMessage)", "\(m.share)"]
        if let session = m.secureSession {
            parts += ["\(session.state)", "\(session.payloadBytesSent)", "\(session.endOfMessageSent)",
                      "\(session.acknowledgedCount)", "\(session.unacknowledgedCount)", "\(session.currentMessageNumber)"]
        } else if case .compat(let sender) = m.stream {
            parts += ["\(sender.valuesSent)"]
        }
        parts += ["\(received.count)", "\(pendingWrites.count)", "\(inFlight?.count ?? -1)", "\(draining)",
                  "\(String(describing: pendingRequest))", "\(pendingCheck)", "\(delivered)", "\(queue.count)",
                  "\(verified.count)", "\(acknowledgementsFed.count)", "\(stale.keys.count)"]
        return parts.joined(separator: "|")
    }
}
