import Transfer
import Trust

extension SenderConnection {
    /// Writes a central may have queued before they are read; one writing more breaks the protocol.
    package static let writeBacklog = 256

    /// What a central that offered the retired framed version 1 is told (one line, nothing sent).
    package static let version1Refusal = "it offered framed version 1, which this bletransfer no longer speaks; "
        + "update bletransfer on that host; nothing was sent"

    /// Serves `offer` to the central that wrote `hello` (or nothing) and subscribed on `link`. A
    /// framed offer without encryption, or version 1, gets one line and nothing else; Apple's flow
    /// (no HELLO) is served unless the keys require the secure mode or the message is addressed.
    package static func start(peer: PeerDescription, offer: Offer, hello: CentralHello, link: Link, keys: Keys,
                              settings: Settings, reorderRisk: String?) -> Start {
        let message = offer.message
        let stream: Stream
        let valueLength: Int
        switch hello {
        case .version2(let version2):
            guard version2.offered.contains(.secure) else {
                return .refused("it offered the framed protocol without encryption, which this "
                    + "bletransfer no longer speaks; update bletransfer on that host; nothing was sent")
            }
            do {
                stream = .secure(try SecureSenderSession(
                    identity: keys.identity, authorizedPeers: keys.authorizedPeers.allowed(for: message), hello: version2,
                    payload: message.body, digest: message.digest, metadata: fileMetadata(message.file),
                    maximumValueLength: link.valueLength, wantsMulti: settings.sessionMessageLimit > 1,
                    overChannel: link.overChannel))
            } catch {
                return .refused("its framed version 2 session could not start: \(error)")
            }
            valueLength = link.valueLength
        case .retired:
            return .refused(version1Refusal)
        case .none:
            if keys.requiresSecure || message.addressee != nil {
                let serves = message.addressee != nil ? "the message under way is addressed to an authorized peer"
                    : "this sender serves authorized peers only"
                return .refused("it did not offer the secure mode (Apple's flow, no HELLO); \(serves), nothing was sent")
            }
            let sender = MessageSender(message: message, maximumValueLength: link.valueLength)
            stream = .compat(sender)
            valueLength = sender.maximumValueLength
        }
        var connection = SenderConnection(peer: peer, offer: offer, stream: stream, link: link, valueLength: valueLength,
                                          settings: settings, authorizedPeers: keys.authorizedPeers, reorderRisk: reorderRisk)
        var actions: [Action] = []
        connection.begin(&actions, at: .zero)
        return .started(connection, actions)
    }

    private init(peer: PeerDescription, offer: Offer, stream: Stream, link: Link, valueLength: Int, settings: Settings,
                 authorizedPeers: AuthorizedPeers, reorderRisk: String?) {
        self.peer = peer
        if case .secure = stream { format = .secure } else { format = .compat }
        overChannel = link.overChannel
        confirmsIndications = link.indications
        self.valueLength = valueLength
        self.settings = settings
        self.authorizedPeers = authorizedPeers
        current = offer
        delivery = SubscriptionDelivery(format: format, confirmsIndications: link.indications,
                                        totalBytes: offer.message.byteCount, limits: settings.delivery)
        startedAt = .zero
        progress = ProgressReports(totalBytes: offer.message.byteCount, interval: settings.progressInterval)
        share = SessionShare(messageLimit: settings.sessionMessageLimit, byteLimit: settings.sessionByteLimit)
        self.reorderRisk = reorderRisk
        self.stream = stream
    }

    /// The HEADER's metadata for a named message (with `meta`). A name that is not a clean relative
    /// path of at most 255 bytes is not sent: the receiver then generates one.
    package static func fileMetadata(_ file: SentFileAttributes?) -> FileMetadata? {
        file.flatMap {
            FileMetadata(name: $0.name, modificationSeconds: $0.modificationSeconds,
                         modificationNanoseconds: $0.modificationNanoseconds)
        }
    }

    /// Arms the bounds of the first message (and the handshake) and hands the first value over.
    private mutating func begin(_ actions: inout [Action], at now: Duration) {
        if confirmsIndications { actions.append(.report(.debug("serving \(peer.address) with confirmed indications: one value in flight"))) }
        if case .secure = stream {
            // Nobody is authenticated until the central answers (and, with indications,
            // confirms) message 1: a silent central is dropped after this.
            start(.handshake, after: settings.handshakeTimeout, &actions)
        }
        armTransferDeadline(&actions)
        pump(&actions, at: now)
    }

    /// Arms the current message's bound: its values at the minimum rate (and, multi, its ACK).
    mutating func armTransferDeadline(_ actions: inout [Action]) {
        let valueCount: Int
        switch stream {
        case .compat(let sender):
            valueCount = sender.valueCount
        case .secure, .taken:
            valueCount = SecureSenderSession.estimatedValueCount(
                payloadLength: current.message.byteCount, maximumValueLength: valueLength, overChannel: overChannel)
        }
        guard let limit = settings.deadline.limit(forWireBytes: valueCount * valueLength,
                                                  confirmedValues: confirmsIndications ? valueCount : 0) else { return }
        let reason = settings.deadline.reason(byteCount: current.message.byteCount, limit: limit, confirmed: confirmsIndications)
        perform(delivery.begin(transferDeadline: limit, reason: reason), &actions, at: startedAt)
    }

    // MARK: Inputs

    /// One input at `now` (since the connection started): what the shell must do, in order; nothing once over.
    package mutating func handle(_ input: Input, at now: Duration) -> [Action] {
        guard !isOver else { return [] }
        var actions: [Action] = []
        switch input {
        case .sent:
            valueTaken(&actions, at: now)
        case .sendFailed(let failure):
            sendFailed(failure, &actions, at: now)
        case .drained:
            drained(&actions, at: now)
        case .confirmed:
            unconfirmed = max(0, unconfirmed - 1)
        case .written(let value):
            // Read between values (`pump`), not in compat. Writes past the backlog are lost: the session fails.
            if case .secure = stream, transfer != .done, heldWrites.count < Self.writeBacklog { heldWrites.append(value) }
        case .hungUp(let reason, let drained):
            hungUp(reason: reason, drainedWhenClosed: drained, &actions, at: now)
        case .timerFired(let timer):
            timerFired(timer, &actions, at: now)
        case .nextMessage(let next):
            answered(next: next, &actions, at: now)
        case .upcoming(let upcoming):
            answered(upcoming: upcoming, &actions)
        case .bluetoothChecked(let up, let risk):
            if reorderRisk == nil { reorderRisk = risk }
            feed(.compatConfirmationDue(bluetoothUp: up), &actions, at: now)
        case .payloadRead(let offset, let bytes):
            payloadAsked = false
            withStream { $0.providePayload(bytes, at: offset) } secure: { $0.providePayload(bytes, at: offset) }
        case .payloadUnreadable(let reason):
            payloadAsked = false
            withStream { $0.payloadUnreadable(reason) } secure: { $0.payloadUnreadable(reason) }
        case .centralTurnedAway:
            if !share.centralWaiting {
                share.centralTurnedAway()
                actions.append(.report(.debug("another central waits: the session under way ends after its current message")))
            }
        case .shutDown(let reason):
            feed(.shutDown(reason: reason), &actions, at: now)
        }
        if !isOver { pump(&actions, at: now) }
        return actions
    }

    /// The central left: the delivery decides what it means; a secure stream paused for the
    /// central (handshake, PROGRESS) stops at once (`pump`).
    private mutating func hungUp(reason: String, drainedWhenClosed: Bool?, _ actions: inout [Action], at now: Duration) {
        guard !delivery.hasHungUp else { return }
        var reason = reason
        if format == .secure, authenticatedPeer != nil, !delivery.isDelivered, share.messages == 0 {
            // A receiver refuses an unlisted sender right after reading its key (message 3).
            reason += " after the secure handshake (it may not list this host's key; 'bletransfer id' prints it)"
        }
        feed(.hungUp(reason: reason, drainedWhenClosed: drainedWhenClosed), &actions, at: now)
    }

    private mutating func timerFired(_ timer: TimerID, _ actions: inout [Action], at now: Duration) {
        guard armed[timer.kind] == timer.generation else { return }
        armed[timer.kind] = nil
        switch timer.kind {
        case .delivery(let kind):
            feed(.timerFired(kind), &actions, at: now)
        case .handshake:
            handshakeTimedOut(&actions, at: now)
        }
    }

    // MARK: Timers

    mutating func start(_ kind: TimerKind, after duration: Duration, _ actions: inout [Action]) {
        cancel(kind, &actions)
        nextGeneration += 1
        armed[kind] = nextGeneration
        actions.append(.startTimer(TimerID(kind: kind, generation: nextGeneration), after: duration))
    }

    mutating func cancel(_ kind: TimerKind, _ actions: inout [Action]) {
        guard let generation = armed.removeValue(forKey: kind) else { return }
        actions.append(.cancelTimer(TimerID(kind: kind, generation: generation)))
    }
}
