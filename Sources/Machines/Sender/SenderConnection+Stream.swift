import Transfer
import Trust

/// The values: one with the link at a time (with indications, after the last one's confirmation),
/// the central's writes read between two of them, `EOM` drained at the end.
extension SenderConnection {
    /// Moves the stream on as far as it can without an input.
    mutating func pump(_ actions: inout [Action], at now: Duration) {
        while !isOver, awaiting == nil {
            switch transfer {
            case .sending, .draining, .done:
                return
            case .confirming:
                if unconfirmed == 0 {
                    transfer = .streaming
                    valueHandedOver(&actions, at: now)
                } else if confirmationsFinished {
                    // The hang-up's grace for a confirmation on its way ran out.
                    transferFailed(.stoppedByUs, &actions, at: now)
                } else {
                    return
                }
            case .readingWrites:
                guard takeHeld(&actions, at: now) else { return }
            case .streaming:
                guard step(&actions, at: now) else { return }
            }
        }
    }

    /// Acts on one held session event, else on one held write; false when none is held.
    private mutating func takeHeld(_ actions: inout [Action], at now: Duration) -> Bool {
        if !heldEvents.isEmpty {
            take(heldEvents.removeFirst(), &actions, at: now)
        } else if !heldWrites.isEmpty {
            read(heldWrites.removeFirst(), &actions, at: now)
        } else {
            return false
        }
        return true
    }

    /// One step between two values; false when the stream waits for an input.
    private mutating func step(_ actions: inout [Action], at now: Duration) -> Bool {
        switch stream {
        case .compat(var sender):
            stream = .taken   // the only owner while it reads (no copy of its window)
            let value = sender.nextValue()
            stream = .compat(sender)
            if let value {
                send(value, &actions)
                return false
            }
            if let wanted = sender.payloadWanted {
                askForPayload(current.message.body, wanted, &actions)
                return false
            }
            if let failure = sender.readFailure {
                // The file failed or shrank while sent: no `EOM`, so the central keeps nothing.
                transferFailed(.other(failure), &actions, at: now)
                return true
            }
            transfer = .draining
            actions.append(.drain)
            return false
        case .secure:
            return secureStep(&actions, at: now)
        case .taken:
            return false
        }
    }

    private mutating func secureStep(_ actions: inout [Action], at now: Duration) -> Bool {
        if secureSession?.endOfMessageSent == true {
            // After `EOM` the central's writes wait until it was drained.
            transfer = .draining
            actions.append(.drain)
            return false
        }
        if takeHeld(&actions, at: now) { return true }
        guard case .secure(var session) = stream else { return false }
        stream = .taken   // the only owner while it seals (no copy of its buffers)
        let value = session.nextValue()
        stream = .secure(session)
        if let value {
            send(value, &actions)
            return false
        }
        if session.endOfMessageSent { return true }
        if let wanted = session.payloadWanted {
            askForPayload(pipeline.sentAhead.last?.message.body ?? current.message.body, wanted, &actions)
            return false
        }
        if let failure = session.localFailure {
            sessionFailed(failure, &actions, at: now)
            return true
        }
        if streamPaused(session, &actions) { return true }
        if !pipeline.sentAhead.isEmpty, pipeline.preparedAhead != session.currentMessageNumber {
            pipeline.preparedAhead = session.currentMessageNumber
            if !delivery.hasHungUp { actions.append(.ask(.prepare(skipping: pipeline.sentAhead.count))) }
        }
        // Waiting for the central's handshake message, a PROGRESS or (multi) an ACK: a hang-up
        // ends the wait unless an ACK is due, which may still come (the ACK timeout bounds it).
        let interruptible = session.state == .awaitingHandshake || session.unacknowledgedCount == 0
        if interruptible, delivery.hasHungUp {
            transferFailed(.stoppedByUs, &actions, at: now)
            return true
        }
        return false
    }

    /// The secure session, to read (a copy: not to keep while the stream changes).
    var secureSession: SecureSenderSession? {
        if case .secure(let session) = stream { session } else { nil }
    }

    /// Nothing to send now: after an END its ACK is awaited (bounded by the ACK timeout); with
    /// `pipeline` the source is asked for the next message at once (then true).
    private mutating func streamPaused(_ session: SecureSenderSession, _ actions: inout [Action]) -> Bool {
        let number = session.currentMessageNumber
        if session.state == .awaitingAck, pipeline.endWritten != number {
            // The socket's small buffer keeps "handed over" close to what bluetoothd took: bounded as after EOM.
            // (With a message sent ahead uncounted, the current one's bound runs; this END's wait starts on its ACK.)
            pipeline.endWritten = number
            if pipeline.sentAhead.isEmpty, !delivery.hasHungUp {
                feed(.endOfMessageWritten, &actions, at: startedAt)
                actions.append(.report(.debug("END of message \(current.sequence) written to \(peer.address); waiting for its ACK")))
            }
        }
        guard session.acceptsNextBeforeAck, pipeline.askedUpcoming != number else { return false }
        pipeline.askedUpcoming = number
        // The fairness rule as on an ACK, counting the current message and those sent ahead.
        let pendingBytes = pipeline.sentAhead.reduce(current.message.byteCount) { $0 + $1.message.byteCount }
        guard !delivery.hasHungUp,
              share.mayStartAnother(pendingMessages: 1 + pipeline.sentAhead.count, pendingBytes: pendingBytes) else {
            return false
        }
        awaiting = .upcoming
        actions.append(.ask(.upcoming(skipping: pipeline.sentAhead.count)))
        return true
    }

    /// The stream needs bytes of the payload's file: the shell reads them (once per request).
    private mutating func askForPayload(_ payload: MessagePayload, _ range: Range<Int>, _ actions: inout [Action]) {
        guard !payloadAsked else { return }
        payloadAsked = true
        actions.append(.readPayload(payload, range))
    }

    /// Changes the stream in place, as its only owner (a copy would copy its buffers).
    mutating func withStream(compat: (inout MessageSender) -> Void, secure: (inout SecureSenderSession) -> Void) {
        switch stream {
        case .compat(var sender):
            stream = .taken
            compat(&sender)
            stream = .compat(sender)
        case .secure(var session):
            stream = .taken
            secure(&session)
            stream = .secure(session)
        case .taken:
            break
        }
    }

    /// Changes the secure session in place, as its only owner; what it throws fails the session (then nil).
    mutating func withSession<T>(_ actions: inout [Action], at now: Duration,
                                 _ change: (inout SecureSenderSession) throws(SecureSessionError) -> T) -> T? {
        guard case .secure(var session) = stream else { return nil }
        stream = .taken
        let result = Result { () throws(SecureSessionError) in try change(&session) }
        stream = .secure(session)
        if case .failure(let error) = result { sessionFailed(error, &actions, at: now) }
        return try? result.get()
    }

    private mutating func send(_ value: [UInt8], _ actions: inout [Action]) {
        transfer = .sending
        if confirmsIndications { unconfirmed += 1 }
        actions.append(.send(value))
    }

    /// The link took the value: handed over, once (with indications) it is confirmed too.
    mutating func valueTaken(_ actions: inout [Action], at now: Duration) {
        guard transfer == .sending else { return }
        if confirmsIndications, unconfirmed > 0 {
            transfer = .confirming
            return
        }
        transfer = .streaming
        valueHandedOver(&actions, at: now)
    }

    /// Progress, and the delivery told how far the stream got (a message sent ahead: once it is current).
    private mutating func valueHandedOver(_ actions: inout [Action], at now: Duration) {
        let bytesSent: Int
        let finished: Bool
        switch stream {
        case .compat(let sender):
            bytesSent = sender.bytesSent
            finished = sender.isFinished
        case .secure(let session):
            guard pipeline.sentAhead.isEmpty else { return }
            bytesSent = session.payloadBytesSent
            finished = session.endOfMessageSent
            if session.payloadBytesNotified > onAirTallied {
                onAirPending += session.payloadBytesNotified - onAirTallied
                onAirTallied = session.payloadBytesNotified
            }
        case .taken:
            return
        }
        if progress.record(bytesSent: bytesSent, at: now - startedAt) {
            let meter = progress.meter
            actions.append(.report(.progress(meter.progress, bytesPerSecond: meter.bytesPerSecond,
                                             secondsRemaining: meter.estimatedRemaining.map(\.seconds))))
        }
        feed(.valueHandedOver(bytesSent: bytesSent, last: finished), &actions, at: now)
    }

    mutating func sendFailed(_ failure: SubscriptionDelivery.TransferFailure, _ actions: inout [Action], at now: Duration) {
        switch transfer {
        case .sending, .confirming:
            transferFailed(failure, &actions, at: now)
        case .draining:
            // A hang-up right after the ACK: it counts within the grace, so a one-message session reads on.
            feed(.transferFailed(failure), &actions, at: now)
            afterEndOfMessage(&actions, at: now)
        case .streaming, .readingWrites, .done:
            break
        }
    }

    mutating func drained(_ actions: inout [Action], at now: Duration) {
        guard transfer == .draining else { return }
        let hungUp = delivery.hasHungUp
        feed(.endOfMessageWritten, &actions, at: now)
        if !hungUp, !isOver {
            let awaited = format == .compat ? "the central to unsubscribe" : "the ACK"
            actions.append(.report(.debug("EOM written to \(peer.address); waiting for \(awaited)")))
        }
        afterEndOfMessage(&actions, at: now)
    }

    /// After `EOM` (drained or not): multi counted every message on its ACK and the central only
    /// unsubscribes; a one-message session reads the ACK.
    private mutating func afterEndOfMessage(_ actions: inout [Action], at now: Duration) {
        guard !isOver, case .secure(let session) = stream, !session.carriesSeveralMessages else {
            stopTransfer(&actions)
            return
        }
        if pipeline.acknowledgedBeforeEndOfMessage {
            sessionEvent(.acknowledged(alreadyStored: false), &actions, at: now)
            stopTransfer(&actions)
            return
        }
        transfer = .readingWrites
    }

    /// The transfer stopped before `EOM`: nothing more is sent.
    mutating func transferFailed(_ failure: SubscriptionDelivery.TransferFailure, _ actions: inout [Action],
                                 at now: Duration) {
        stopTransfer(&actions)
        feed(.transferFailed(failure), &actions, at: now)
    }

    /// Nothing more is sent or read. Over a channel, closing our end tells the central its last ACK arrived (no reply).
    mutating func stopTransfer(_ actions: inout [Action]) {
        guard transfer != .done else { return }
        transfer = .done
        heldWrites = []
        heldEvents = []
        if overChannel { actions.append(.closeChannel) }
    }
}
