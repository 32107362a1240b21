import Transfer

/// Whether one message of a connection counts as delivered, as a pure machine fed by
/// `SenderConnection` (no clock, no I/O: every input in every state can be tested).
///
/// The framed format counts on the sealed ACK once every value was handed over; compat on a
/// hang-up after `EOM` was written, once Bluetooth is still up `compatConfirmationDelay` later.
/// A hang-up while values are still handed over waits for their verdict (they may still drain).
package struct SubscriptionDelivery: Sendable, Hashable {
    /// The durations the rules use, from `PeripheralConfiguration`.
    package struct Limits: Sendable, Hashable {
        package var acknowledgementTimeout: Duration
        package var unsubscribeTimeout: Duration
        package var acknowledgementGrace: Duration
        package var compatConfirmationDelay: Duration

        package init(acknowledgementTimeout: Duration, unsubscribeTimeout: Duration, acknowledgementGrace: Duration,
                     compatConfirmationDelay: Duration) {
            self.acknowledgementTimeout = acknowledgementTimeout
            self.unsubscribeTimeout = unsubscribeTimeout
            self.acknowledgementGrace = acknowledgementGrace
            self.compatConfirmationDelay = compatConfirmationDelay
        }
    }

    /// The timers one subscription runs; each at most once at a time.
    package enum Timer: Sendable, Hashable, CaseIterable {
        /// The subscription's bound: the whole message, then the ACK or the unsubscription.
        case deadline
        /// After a hang-up with indications: how long a confirmation on its way may still arrive.
        case confirmationGrace
        /// Compat: how long after the hang-up Bluetooth must still be up.
        case compatConfirmation
        /// Framed: how long after the hang-up a late ACK still counts.
        case acknowledgementGrace
    }

    /// How the transfer task stopped short.
    package enum TransferFailure: Sendable, Hashable {
        /// The socket's peer closed it: the central unsubscribed.
        case closedByPeer
        /// We stopped it (cancelled, channel closed); whoever did reports why.
        case stoppedByUs
        case other(String)
    }

    package enum Input: Sendable, Hashable {
        /// Another value handed to the channel; `bytesSent` of the payload so far; `last`: `EOM`.
        case valueHandedOver(bytesSent: Int, last: Bool)
        /// The transfer task drained the channel after `EOM`: bluetoothd took everything.
        case endOfMessageWritten
        case transferFailed(TransferFailure)
        /// The session's sealed ACK of its one message (verified by the session).
        case acknowledged
        /// A multi session's message was acknowledged and counted by the connection itself (no
        /// `deliver`); after the stream's CLOSE and `EOM` the central has `unsubscribeTimeout` to leave.
        case countedInSession
        /// A multi message counted after the hang-up (its ACK, a D-Bus call, came after the socket's hang-up) was
        /// recorded by the engine: only now the subscription ends, so the engine never offers it again.
        case recordedAfterHangUp
        /// The central left. `drainedWhenClosed`: we closed the channel for it, and bluetoothd had
        /// taken everything sent by then (nil: we did not close it).
        case hungUp(reason: String, drainedWhenClosed: Bool?)
        /// A timer fired; one not running (cancelled meanwhile) changes nothing.
        case timerFired(Timer)
        /// Answers `checkBluetoothNow`: Bluetooth is still up. Ignored unless asked.
        case compatConfirmationDue(bluetoothUp: Bool)
        /// Everything ends (adapter off, run over).
        case shutDown(reason: String)
        /// We refused the central (and reported why): the subscription ends, nothing counts.
        case refusedByUs
    }

    package enum Action: Sendable, Hashable {
        /// The message counts as delivered (at most once).
        case deliver
        /// Report the transfer aborted with this reason (nothing counted).
        case reportAborted(String)
        case reportDropped(String)
        case startTimer(Timer, after: Duration)
        case cancelTimer(Timer)
        case cancelTransfer
        case finishConfirmations
        case closeChannel
        /// Ask whether Bluetooth is still up now and feed `compatConfirmationDue` at once.
        case checkBluetoothNow
        /// Disconnect the central's device (it missed its bound).
        case disconnect
        /// The subscription is over; `announce`: tell the engine the characteristic is free.
        case end(announce: Bool)
    }

    /// `.compat` or `.secure` (ACKs are session records, counted in the session, possibly after a hang-up).
    package let format: TransferFormat
    package var version2: Bool { format != .compat }
    package let confirmsIndications: Bool
    package let totalBytes: Int
    package let limits: Limits

    package private(set) var transferRunning = true
    package private(set) var bytesSent = 0
    /// Every value, `EOM` included, was handed to the channel.
    package private(set) var allValuesHandedOver = false
    /// ... and bluetoothd took them.
    package private(set) var endOfMessageWritten = false
    /// A fitting ACK came before every value was handed over; it counts once the last is out.
    package private(set) var earlyAcknowledgement = false
    package private(set) var isDelivered = false
    package private(set) var hangUpReason: String?
    package private(set) var drainedWhenClosed: Bool?
    package private(set) var runningTimers: Set<Timer> = []
    package private(set) var deadlineReason: String?
    /// A `checkBluetoothNow` was asked for and its answer not yet fed.
    private var bluetoothCheckPending = false
    package private(set) var isOver = false

    package var hasHungUp: Bool { hangUpReason != nil }

    package init(format: TransferFormat, confirmsIndications: Bool, totalBytes: Int, limits: Limits) {
        self.format = format
        self.confirmsIndications = confirmsIndications
        self.totalBytes = totalBytes
        self.limits = limits
    }

    /// Arms the transfer deadline (nil: none) as the subscription starts.
    package mutating func begin(transferDeadline: Duration?, reason: String) -> [Action] {
        guard let transferDeadline, !isOver else { return [] }
        var actions: [Action] = []
        arm(&actions, after: transferDeadline, reason: reason)
        return actions
    }

    package mutating func handle(_ input: Input) -> [Action] {
        guard !isOver else { return [] }
        var actions: [Action] = []
        switch input {
        case .valueHandedOver(let bytes, let last):
            guard transferRunning else { break }
            bytesSent = bytes
            if last { allValuesHandedOver = true }
            if last && earlyAcknowledgement { deliver(&actions) }
        case .endOfMessageWritten:
            afterEndOfMessage(&actions)
        case .transferFailed(let failure):
            transferFailed(failure, &actions)
        case .acknowledged:
            acknowledged(&actions)
        case .countedInSession:
            countedInSession(&actions)
        case .recordedAfterHangUp:
            guard version2, isDelivered, hasHungUp else { break }
            end(&actions, announce: true)
        case .hungUp(let reason, let drained):
            hangUp(&actions, reason: reason, drainedWhenClosed: drained)
        case .timerFired(let timer):
            guard runningTimers.remove(timer) != nil else { break }
            timerFired(timer, &actions)
        case .compatConfirmationDue(let bluetoothUp):
            compatConfirmationDue(bluetoothUp: bluetoothUp, &actions)
        case .shutDown(let reason):
            if !isDelivered { actions.append(.reportAborted(reason)) }
            end(&actions, announce: false)
        case .refusedByUs:
            end(&actions, announce: true)
        }
        return actions
    }

    /// The transfer task wrote `EOM`: what the central must do next gets its deadline.
    private mutating func afterEndOfMessage(_ actions: inout [Action]) {
        guard transferRunning else { return }
        transferRunning = false
        endOfMessageWritten = true
        if hasHungUp {
            settleAfterHangUp(&actions)
        } else if isDelivered {
            // Acknowledged before the transfer task reported EOM: the after-ACK deadline runs.
        } else if format != .compat {
            let limit = limits.acknowledgementTimeout
            arm(&actions, after: limit, reason: "no ACK within \(Self.describe(limit)) of EOM (--ack-timeout)")
        } else {
            armUnsubscribing(&actions) { "it did not unsubscribe within \($0) of EOM" }
        }
    }

    private mutating func transferFailed(_ failure: TransferFailure, _ actions: inout [Action]) {
        guard transferRunning else { return }
        transferRunning = false
        if hasHungUp {
            // The hang-up came while the last values were being drained: not written.
            settleAfterHangUp(&actions)
            return
        }
        switch failure {
        case .closedByPeer:
            hangUp(&actions, reason: "the central unsubscribed", drainedWhenClosed: nil)
        case .stoppedByUs:
            return
        case .other(let description):
            abort(&actions, reason: "sending failed: \(description)")
        }
    }

    /// The session's ACK of its one message: counted once every value was handed over.
    private mutating func acknowledged(_ actions: inout [Action]) {
        guard format != .compat, !isDelivered else { return }
        guard allValuesHandedOver else {
            earlyAcknowledgement = true
            return
        }
        deliver(&actions)
        if hasHungUp && !transferRunning {
            end(&actions, announce: true)
        } else {
            // A bletransfer central unsubscribes next; one that stays holds the characteristic (and advertising).
            armUnsubscribing(&actions) { "it stayed subscribed \($0) after its ACK" }
        }
    }

    /// The session counted its last message delivered (version 2).
    private mutating func countedInSession(_ actions: inout [Action]) {
        guard version2, !isDelivered else { return }
        isDelivered = true
        if hasHungUp {
            // The ACK raced the central's unsubscribing and still counts; the grace that
            // waited for it is over. The subscription ends on `recordedAfterHangUp`.
            cancel(.acknowledgementGrace, &actions)
            return
        }
        armUnsubscribing(&actions) { "it stayed subscribed \($0) after the session's last ACK" }
    }

    /// Bluetooth's state read after a compat central left: up, the message counts.
    private mutating func compatConfirmationDue(bluetoothUp: Bool, _ actions: inout [Action]) {
        guard bluetoothCheckPending else { return }
        bluetoothCheckPending = false
        guard !isDelivered else { return }
        if bluetoothUp {
            deliver(&actions)
            end(&actions, announce: true)
        } else {
            abort(&actions, reason: "Bluetooth went away as the central left; not counted")
        }
    }

    private mutating func timerFired(_ timer: Timer, _ actions: inout [Action]) {
        switch timer {
        case .deadline:
            let reason = deadlineReason ?? "it missed its deadline"
            actions.append(.reportDropped(reason))
            if isDelivered {
                end(&actions, announce: true)   // counted already; only the channel is freed
            } else {
                abort(&actions, reason: "central dropped: \(reason)")
            }
            actions.append(.disconnect)
        case .confirmationGrace:
            actions.append(.finishConfirmations)
        case .compatConfirmation:
            // Bluetooth's state is read by whoever runs the timer and fed back.
            bluetoothCheckPending = true
            actions.append(.checkBluetoothNow)
        case .acknowledgementGrace:
            if !isDelivered {
                // How far the stream had got says what the link may have lost in flight.
                abort(&actions, reason: "the central left without acknowledging the message, after \(bytesSent) of \(totalBytes) bytes")
            }
        }
    }

    /// The central left. While the transfer task runs its verdict decides (unsent values fail, an
    /// `EOM` handed over drains or not): a central leaving right after `EOM` may be heard first.
    private mutating func hangUp(_ actions: inout [Action], reason: String, drainedWhenClosed: Bool?) {
        guard !hasHungUp else { return }
        hangUpReason = reason
        if let drainedWhenClosed {
            self.drainedWhenClosed = drainedWhenClosed
            actions.append(.closeChannel)
        }
        if transferRunning {
            if confirmsIndications {
                // A confirmation on its way may still come (Confirm is a D-Bus call, the hang-up
                // a socket event, so EOM's may arrive second): give it the ACK's grace, then stop.
                start(.confirmationGrace, after: limits.acknowledgementGrace, &actions)
            }
            return
        }
        settleAfterHangUp(&actions)
    }

    /// Decides what a hang-up means once the transfer task has stopped.
    private mutating func settleAfterHangUp(_ actions: inout [Action]) {
        cancel(.confirmationGrace, &actions)   // the transfer waits for nothing any more
        actions.append(.closeChannel)
        if allValuesHandedOver && drainedWhenClosed == true {
            // EOM had been taken by bluetoothd before we stopped the channel.
            endOfMessageWritten = true
        }
        if isDelivered {
            end(&actions, announce: true)
        } else if endOfMessageWritten && format == .compat {
            // The socket hangs up alike on unsubscribing and on link loss, and bluetoothd reads well ahead of the
            // radio: confirm Bluetooth is still up a moment later (a teardown meanwhile aborts through shutDown).
            let delay = limits.compatConfirmationDelay
            if delay <= .zero {
                bluetoothCheckPending = true
                actions.append(.checkBluetoothNow)
            } else {
                start(.compatConfirmation, after: delay, &actions)
            }
        } else if format != .compat && (allValuesHandedOver || endOfMessageWritten) {
            // The ACK may still be on its way (a D-Bus call racing the socket hang-up). In a
            // multi session that is so once the message's END is out, before the stream's EOM.
            start(.acknowledgementGrace, after: limits.acknowledgementGrace, &actions)
        } else {
            let reason = hangUpReason ?? "the subscription ended"
            let detail = allValuesHandedOver
                ? "before EOM reached bluetoothd"
                : "after \(bytesSent) of \(totalBytes) bytes"
            abort(&actions, reason: "\(reason) \(detail)")
        }
    }

    private mutating func deliver(_ actions: inout [Action]) {
        guard !isDelivered else { return }
        isDelivered = true
        actions.append(.deliver)
    }

    private mutating func abort(_ actions: inout [Action], reason: String) {
        actions.append(.reportAborted(reason))
        end(&actions, announce: true)
    }

    private mutating func end(_ actions: inout [Action], announce: Bool) {
        if transferRunning {
            transferRunning = false
            actions.append(.cancelTransfer)
        }
        for timer in Timer.allCases where runningTimers.contains(timer) {
            cancel(timer, &actions)
        }
        bluetoothCheckPending = false
        if confirmsIndications { actions.append(.finishConfirmations) }
        actions.append(.closeChannel)
        actions.append(.end(announce: announce))
        isOver = true
    }

    private mutating func arm(_ actions: inout [Action], after limit: Duration, reason: String) {
        deadlineReason = reason
        start(.deadline, after: limit, &actions)
    }

    private mutating func armUnsubscribing(_ actions: inout [Action], reason: (String) -> String) {
        let limit = limits.unsubscribeTimeout
        arm(&actions, after: limit, reason: "\(reason(Self.describe(limit))) (--unsubscribe-timeout)")
    }

    private mutating func start(_ timer: Timer, after duration: Duration, _ actions: inout [Action]) {
        cancel(timer, &actions)
        runningTimers.insert(timer)
        actions.append(.startTimer(timer, after: duration))
    }

    private mutating func cancel(_ timer: Timer, _ actions: inout [Action]) {
        if runningTimers.remove(timer) != nil {
            actions.append(.cancelTimer(timer))
        }
    }

    package static func describe(_ duration: Duration) -> String {
        let seconds = duration.components.seconds
        return seconds >= 120 ? "\(seconds / 60) min \(seconds % 60) s" : "\(seconds) s"
    }
}
