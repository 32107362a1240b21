import Transfer
import Trust

/// A verified message: stored unless it is already, acknowledged (an ACK means "stored"), reported; `multi` goes on.
extension ReceiverVisit {
    /// The sender for the receipt journal: a listed key (the same across addresses and restarts), else its address.
    package static func receiptSender(_ key: AuthenticatedPeer?, peer: PeerDescription) -> String {
        if let key, key.isListed { return key.fingerprint }
        return peer.address
    }

    /// A message sent again (our ACK unseen) is acknowledged and said, not stored twice; else the shell stores it.
    mutating func take(_ message: ReceivedMessage, duration: Duration, _ actions: inout [Action], at now: Duration) {
        let sender = Self.receiptSender(assembly.authenticatedSender, peer: facts.peer)
        if let digest = message.digest, let earlier = StoredMessages.takeEarlierCopy(of: digest, from: &remembered) {
            let taken = Taken(message: message, duration: duration, sender: sender, earlierCopy: earlier)
            acknowledge(taken, &actions)
            if pending == nil { goOn(after: taken, &actions, at: now) }
            return
        }
        pending = .storing(message: message, duration: duration, sender: sender)
        actions.append(.store(message, sender: sender))
    }

    mutating func stored(_ outcome: StoreOutcome, _ actions: inout [Action], at now: Duration) {
        guard case .storing(let message, let duration, let sender) = pending else { return }
        pending = nil
        var taken = Taken(message: message, duration: duration, sender: sender)
        switch outcome {
        case .stored(let sequence, let path):
            taken.sequence = sequence
            taken.storedAt = path
            if let digest = message.digest { storedDigests.append(digest) }
        case .storedBefore(let path):
            // Stored by an earlier run (killed, restarted) the sender never saw acknowledge: counted now.
            taken.earlierCopy = message.digest.map { UnacknowledgedMessage(digest: $0, storedAt: path) }
            taken.storedByEarlierRun = true
        case .refused(let reason):
            // No ACK: the sender keeps it, this peer is backed off and others are served.
            finish(.refused(bound: "storage", reason: "the message could not be stored (\(reason))"), &actions)
            return
        }
        acknowledge(taken, &actions)
        if pending == nil { goOn(after: taken, &actions, at: now) }
    }

    /// Writes a stored message's sealed ACK (Apple's flow has none): only this central could make it.
    private mutating func acknowledge(_ taken: Taken, _ actions: inout [Action]) {
        guard assembly.isSecure else { return }
        // The last message this run wants: in a multi session CLOSE 01 goes with its ACK.
        let lastWanted = taken.earlierCopy == nil && facts.messageCount.map { received + 1 >= $0 } ?? false
        let plan = AcknowledgementPlan(
            overChannel: facts.overChannel, offeredAsCommand: facts.offeredAsCommand, commandAllowed: facts.commandAllowed,
            sessionGoesOn: assembly.expectsMoreMessages, pipelines: assembly.pipelines, lastWanted: lastWanted)
        do {
            let values = try assembly.secureAcknowledgement(alreadyStored: taken.earlierCopy != nil, closing: plan.closing)
            pending = .acknowledging(taken, plan)
            actions.append(.writeAcknowledgement(values, asCommand: plan.asCommand, settles: plan.settles))
        } catch {
            actions.append(.report(.warning("could not acknowledge the message to \(EventText.describe(facts.peer)): \(error)")))
            book(taken, plan.booking(written: false), &actions)
        }
    }

    mutating func acknowledgementWritten(failure: String?, _ actions: inout [Action], at now: Duration) {
        guard case .acknowledging(let taken, let plan) = pending else { return }
        pending = nil
        if let failure {
            actions.append(.report(.warning("could not acknowledge the message to \(EventText.describe(facts.peer)): \(failure)")))
        }
        book(taken, plan.booking(written: failure == nil), &actions)
        goOn(after: taken, &actions, at: now)
    }

    /// Books what shows the ACK arrived; what nothing confirms is remembered: sent again, it is not stored twice.
    private mutating func book(_ taken: Taken, _ booking: AcknowledgementPlan.Booking, _ actions: inout [Action]) {
        guard let digest = taken.message.digest else { return }
        switch booking {
        case .writeReply:
            actions.append(.forgetReceipt(sender: taken.sender, digest: digest))
        case .channelClose:
            awaitingClose.append(UnacknowledgedMessage(digest: digest, storedAt: taken.storedWhere, sender: taken.sender))
        case .senderAnswer, .nothing:
            if booking == .senderAnswer, let number = assembly.currentMessageNumber {
                unconfirmed.pending.append(UnconfirmedAcknowledgement(
                    message: number, digest: digest, storedAt: taken.storedWhere, sender: taken.sender))
            } else {
                StoredMessages.append(UnacknowledgedMessage(digest: digest, storedAt: taken.storedWhere), to: &remembered)
            }
        }
    }

    /// Reports the message, then goes on: the visit ends with the stream (or our closing ACK);
    /// with `pipeline` the next message may be in values read already.
    private mutating func goOn(after taken: Taken, _ actions: inout [Action], at now: Duration) {
        report(taken, &actions)
        guard assembly.expectsMoreMessages else {
            sessionOver(&actions)
            return
        }
        admission.nextMessage()
        let next = assembly.continueAfterMessage(at: now)
        let lookUp = takeWrites(&actions)
        guard let next else { return }
        if let lookUp {
            pending = .checkpoint(next, afterValue: true)
            actions.append(.lookUpCheckpoint(sender: lookUp.sender, header: lookUp.header))
        } else {
            proceed(with: next, afterValue: true, &actions, at: now)
        }
    }

    /// Counts and reports a message: `received` if stored now, a warning if it came again.
    private mutating func report(_ taken: Taken, _ actions: inout [Action]) {
        if taken.storedByEarlierRun { count(&actions) }
        let message = taken.message
        if let earlierCopy = taken.earlierCopy {
            let place = earlierCopy.storedAt.map { " (stored as \($0))" } ?? ""
            actions.append(.report(.warning("\(EventText.describe(facts.peer)) sent again the message it had not seen "
                + "acknowledged, sha256 \(message.digest.map { lowercaseHex($0) } ?? "?")\(place): acknowledged, not stored twice")))
            return
        }
        count(&actions)
        let summary = MessageSummary(
            sequence: taken.sequence, byteCount: message.byteCount,
            format: message.format,
            sha256: message.digest.map { lowercaseHex($0) }, duration: taken.duration, peerKey: assembly.authenticatedSender,
            fileName: message.file?.name, resumedFrom: assembly.resumedFrom)
        actions.append(.report(.received(summary, storedAt: taken.storedAt)))
        if let key = assembly.authenticatedSender, !key.isListed {
            actions.append(.report(.unauthenticated(key)))
        }
    }

    private mutating func count(_ actions: inout [Action]) {
        received += 1
        actions.append(.countReceived)
    }
}
