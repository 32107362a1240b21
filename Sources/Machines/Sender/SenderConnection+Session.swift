import Transfer
import Trust

/// The encrypted session: the central's writes, what they mean, a multi session's next message and the pipeline.
extension SenderConnection {
    /// A write of the central, read between two values (or after a one-message `EOM`).
    mutating func read(_ value: [UInt8], _ actions: inout [Action], at now: Duration) {
        guard let events = withSession(&actions, at: now, { session throws(SecureSessionError) in
            try session.receiveWrite(value)
        }) else { return }
        heldEvents += events
        while awaiting == nil, !isOver, transfer != .done, !heldEvents.isEmpty {
            take(heldEvents.removeFirst(), &actions, at: now)
        }
    }

    mutating func take(_ event: SecureSenderSession.Event, _ actions: inout [Action], at now: Duration) {
        guard let session = secureSession else { return }
        switch event {
        case .acknowledged where session.carriesSeveralMessages:
            acknowledgedInSession(&actions, at: now)
        case .acknowledged:
            guard session.endOfMessageSent else {
                // A central may acknowledge on END; EOM still goes out first.
                pipeline.acknowledgedBeforeEndOfMessage = true
                return
            }
            sessionEvent(event, &actions, at: now)
            stopTransfer(&actions)
        case .centralAuthenticated, .resumed:
            sessionEvent(event, &actions, at: now)
        case .closedByCentral, .refusedByCentral:
            sessionEvent(event, &actions, at: now)
            stopTransfer(&actions)
        }
    }

    /// A session event other than a multi ACK. After the central's CLOSE (it takes no more) a
    /// message under way is not counted and stays to be sent again; the central unsubscribes next.
    mutating func sessionEvent(_ event: SecureSenderSession.Event, _ actions: inout [Action], at now: Duration) {
        switch event {
        case .centralAuthenticated(let key):
            let peer = AuthenticatedPeer(key)
            authenticatedPeer = peer
            cancel(.handshake, &actions)
            if !peer.isListed { actions.append(.noticeUnauthenticated(peer)) }
            actions.append(.report(.debug("secure session with \(self.peer.address): central authenticated as \(peer.fingerprint)")))
        case .resumed(let offset):
            resumedFrom = Int(offset)
            actions.append(.report(.info("\(peer.address) holds \(offset) bytes of message \(current.sequence) "
                + "from an earlier visit: continuing from there")))
        case .acknowledged:
            feed(.acknowledged, &actions, at: now)
        case .closedByCentral(let reason):
            let pending = delivery.isDelivered ? "" : "; message \(current.sequence) stays to be sent again"
            actions.append(.report(.info("\(peer.address) closed the session (reason \(reason)) after "
                + "\(share.messages) messages\(pending)")))
            feed(.refusedByUs, &actions, at: now)
        case .refusedByCentral(let outcome):
            let why = outcome == 0x03 ? "its digest did not match" : "it is over the receiver's limits"
            actions.append(.report(.warning("\(peer.address) refused the message (\(why)); it stays to be sent again")))
            feed(.refusedByUs, &actions, at: now)
        }
    }

    /// Multi: the current message was acknowledged. It counts now (a sealed ACK comes only from the
    /// receiver that stored it, even when the hang-up, a socket event, overtook it, a D-Bus call);
    /// then the source is asked for the next one, or the session closes.
    private mutating func acknowledgedInSession(_ actions: inout [Action], at now: Duration) {
        // An ACK and the central's CLOSE may come in one write: count, send no more.
        let centralClosed = secureSession?.state == .closedByCentral
        var sentAhead: (message: OutgoingMessage, number: UInt32, endWritten: Bool)?
        if let upcoming = pipeline.sentAhead.first {
            // The earliest message's ACK: counted; the first one sent after it becomes current.
            pipeline.sentAhead.removeFirst()
            sentAhead = (upcoming.message, upcoming.number, pipeline.endWritten.map { $0 >= upcoming.number } ?? false)
        }
        let centralLeft = delivery.hasHungUp
        let hangUpReason = delivery.hangUpReason
        // Counted before anything is awaited: a hang-up meanwhile must not report it lost.
        feed(.countedInSession, &actions, at: now)
        share.delivered(payloadBytes: current.message.byteCount)
        deliverCurrent(engineOffersNext: false, &actions, at: now)
        let continuation = SessionContinuation(centralLeft: centralLeft, wantsNext: !centralClosed,
                                               hasSentAhead: sentAhead != nil, shareAllowsAnother: share.mayStartAnother())
        awaiting = .next(continuation, sentAhead: sentAhead, centralClosed: centralClosed, hangUpReason: hangUpReason)
        if continuation.asksForNext {
            actions.append(.ask(.nextAvailable))
        } else {
            answered(next: nil, &actions, at: now)
        }
    }

    /// The source's next message after a multi ACK (nil: none ready): `SessionContinuation` decides.
    mutating func answered(next: Offer?, _ actions: inout [Action], at now: Duration) {
        guard case .next(let continuation, let sentAhead, let centralClosed, let hangUpReason) = awaiting else { return }
        awaiting = nil
        if let next { offerTaken = next }
        let decision = continuation.decide(
            hasNext: next != nil, nextIsForThisPeer: next?.message.isAddressed(to: authenticatedPeer) ?? false,
            subscriptionStillCurrent: true, hungUpByNow: delivery.hasHungUp)
        switch decision {
        case .goOn(let hangUpAfterwards):
            if let next {
                startNext(next, sentAheadEndWritten: continuation.takesSentAhead && (sentAhead?.endWritten ?? false),
                          hangUp: hangUpAfterwards ? hangUpReason ?? "the central left" : nil, &actions, at: now)
            }
        case .close(let recordedAfterHangUp, let othersGetATurn):
            if recordedAfterHangUp { feed(.recordedAfterHangUp, &actions, at: now) }
            if othersGetATurn {
                actions.append(.report(.info("closing the session with \(peer.address) after \(share.messages) messages: "
                    + "others get a turn")))
            }
        }
        guard !isOver, transfer != .done, !centralClosed else { return }
        continueStream(with: decision, next: next, sentAhead: sentAhead?.message, &actions, at: now)
    }

    /// After a multi ACK: the message sent ahead goes on (it must be the one the source gave), the
    /// next one starts, or CLOSE and `EOM` end the stream.
    private mutating func continueStream(with decision: SessionContinuation.Decision, next: Offer?,
                                         sentAhead: OutgoingMessage?, _ actions: inout [Action], at now: Duration) {
        _ = withSession(&actions, at: now) { session throws(SecureSessionError) in
            if let sentAhead {
                guard case .goOn = decision, let next, next.message.digest == sentAhead.digest else {
                    throw SecureSessionError.protocolViolation(
                        "the sender's next message changed while it was sent ahead; the session ends")
                }
            } else if case .goOn = decision, let next {
                try session.sendNext(payload: next.message.body, digest: next.message.digest,
                                     metadata: Self.fileMetadata(next.message.file))
            } else {
                try session.finish()
            }
        }
    }

    /// The next message becomes current, under a fresh delivery and bound. `hangUp`: the central
    /// left with the message sent ahead outstanding, which counts only if its ACK comes in the grace.
    private mutating func startNext(_ next: Offer, sentAheadEndWritten: Bool, hangUp: String?,
                                    _ actions: inout [Action], at now: Duration) {
        flushOnAir(&actions)
        for kind in SubscriptionDelivery.Timer.allCases { cancel(.delivery(kind), &actions) }
        delivery = SubscriptionDelivery(format: format, confirmsIndications: confirmsIndications,
                                        totalBytes: next.message.byteCount, limits: settings.delivery)
        current = next
        startedAt = now
        progress = ProgressReports(totalBytes: next.message.byteCount, interval: settings.progressInterval)
        resumedFrom = nil
        armTransferDeadline(&actions)
        // Its END is out: its ACK is awaited under the ACK timeout from now.
        if sentAheadEndWritten { feed(.endOfMessageWritten, &actions, at: now) }
        if let hangUp, !isOver, !delivery.hasHungUp {
            feed(.hungUp(reason: hangUp, drainedWhenClosed: nil), &actions, at: now)
        }
    }

    /// The source's message for the pipeline: sent at once, ahead of the current one's ACK.
    mutating func answered(upcoming: OutgoingMessage?, _ actions: inout [Action]) {
        guard case .upcoming = awaiting else { return }
        awaiting = nil
        guard let upcoming, upcoming.isAddressed(to: authenticatedPeer), transfer != .done,
              case .secure = stream else { return }
        actions.append(.report(.debug("\(peer.address): sending the next message ahead of message \(current.sequence)'s ACK")))
        let number = withSession(&actions, at: startedAt) { session throws(SecureSessionError) in
            try session.sendNext(payload: upcoming.body, digest: upcoming.digest, metadata: Self.fileMetadata(upcoming.file))
            return session.currentMessageNumber
        }
        if let number { pipeline.sentAhead.append((upcoming, number)) }
    }

    /// The session failed (bad write, refused key, unreadable file): one line, nothing counted, central dropped.
    mutating func sessionFailed(_ error: SecureSessionError, _ actions: inout [Action], at now: Duration) {
        let reason: String
        switch error {
        case .unauthorizedPeer(let key):
            if let addressee = current.message.addressee, let listed = authorizedPeers.peer(for: key), listed.isListed {
                // Authorized, but not the one this message is for: told nothing about it.
                reason = "the message under way is for \(addressee), not for \(listed.name ?? key.fingerprint); "
                    + "nothing was sent after the handshake's first message"
                actions.append(.addressedElsewhere(AuthenticatedPeer(listed)))
            } else {
                reason = "its key \(key.fingerprint) is not in the authorized peers; nothing was sent after the handshake's first message"
            }
        default:
            reason = "secure session failed: \(error); nothing counted"
        }
        refuse(reason, &actions, at: now)
    }

    /// The handshake's bound passed before the central answered (or confirmed) message 1.
    mutating func handshakeTimedOut(_ actions: inout [Action], at now: Duration) {
        guard authenticatedPeer == nil, secureSession?.state == .awaitingHandshake else { return }
        let seconds = settings.handshakeTimeout.components.seconds
        let reason = switch transfer {
        case .confirming:
            "it did not confirm the indication carrying the handshake's first message within \(seconds) s; nothing was sent after it"
        case .sending:
            "it did not take the handshake's first message within \(seconds) s; nothing was sent after it"
        default:
            "\(Self.handshakeTimeoutPrefix) \(seconds) s; nothing was sent after the handshake's first message"
        }
        refuse(reason, &actions, at: now)
    }

    static let handshakeTimeoutPrefix = "no answer to the handshake within"

    /// One line naming the central, nothing counted, its link dropped.
    private mutating func refuse(_ reason: String, _ actions: inout [Action], at now: Duration) {
        actions.append(.report(.dropped(reason)))
        stopTransfer(&actions)
        feed(.refusedByUs, &actions, at: now)
        actions.append(.disconnect)
    }
}
