import Transfer
import Trust

/// Whether the current message counts: `SubscriptionDelivery` is fed here; its actions become ours.
extension SenderConnection {
    mutating func feed(_ input: SubscriptionDelivery.Input, _ actions: inout [Action], at now: Duration) {
        perform(delivery.handle(input), &actions, at: now)
    }

    mutating func perform(_ deliveryActions: [SubscriptionDelivery.Action], _ actions: inout [Action], at now: Duration) {
        for action in deliveryActions {
            switch action {
            case .deliver:
                deliverCurrent(engineOffersNext: true, &actions, at: now)
            case .reportAborted(let reason):
                actions.append(.report(.aborted(reason)))
            case .reportDropped(let reason):
                actions.append(.report(.dropped(reason)))
            case .startTimer(let timer, let duration):
                start(.delivery(timer), after: duration, &actions)
            case .cancelTimer(let timer):
                cancel(.delivery(timer), &actions)
            case .cancelTransfer:
                stopTransfer(&actions)
            case .finishConfirmations:
                // The stream stops waiting for them (`pump`).
                confirmationsFinished = true
            case .closeChannel:
                actions.append(.closeChannel)
            case .checkBluetoothNow:
                actions.append(.checkBluetooth)
            case .disconnect:
                actions.append(.disconnect)
            case .end(let announce):
                end(announce: announce, &actions)
            }
        }
    }

    /// The current message counts as delivered: the one place a message is counted.
    mutating func deliverCurrent(engineOffersNext: Bool, _ actions: inout [Action], at now: Duration) {
        flushOnAir(&actions)
        deliveredSequences.append(current.sequence)
        if offerTaken?.sequence == current.sequence { offerTaken = nil }
        actions.append(.deliver(current, summary(at: now), engineOffersNext: engineOffersNext))
    }

    func summary(at now: Duration) -> MessageSummary {
        MessageSummary(
            sequence: current.sequence, byteCount: current.message.byteCount, format: format,
            sha256: lowercaseHex(current.message.digest), duration: now - startedAt,
            ordering: format == .compat && !confirmsIndications ? reorderRisk.map { .atRisk(because: "has \($0)") } : nil,
            peerKey: authenticatedPeer, resumedFrom: resumedFrom)
    }

    /// Tallies the payload bytes of the current message put on the air since the last tally.
    mutating func flushOnAir(_ actions: inout [Action]) {
        guard onAirPending > 0 else { return }
        actions.append(.tallyOnAir(digest: current.message.digest, bytes: onAirPending))
        onAirPending = 0
    }

    /// The connection is over: every armed timer is cancelled, nothing more is sent.
    private mutating func end(announce: Bool, _ actions: inout [Action]) {
        flushOnAir(&actions)
        stopTransfer(&actions)
        for kind in TimerKind.allCases { cancel(kind, &actions) }
        awaiting = nil
        isOver = true
        actions.append(.end(announce: announce))
    }
}
