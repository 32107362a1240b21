import Transfer
import Trust

/// One central's connection to the sender as a pure machine, one value per subscription (AcquireNotify socket,
/// PropertiesChanged fallback or L2CAP channel). The shell (`SenderConnectionShell` in Roles) hands each input to
/// `handle(_:at:)` and performs the actions.
///
/// It owns every decision of a connection: Apple's flow (`MessageSender`) or the encrypted session with its handshake
/// and bound; values one at a time (confirmed indications each after the last one's confirmation); whether a message
/// counts (`SubscriptionDelivery`, fed only here, so the `deliver` action is the one place a message is counted); a
/// multi session's next message, the pipeline window, the fairness rule (`SessionShare`, `SessionContinuation`), and
/// which central writes are read when. No clock (the shell gives the time since the connection started), no I/O:
/// every input can be tried in every state.
package struct SenderConnection: Sendable {
    /// What a connection is told, from `PeripheralConfiguration`.
    package struct Settings: Sendable {
        package var delivery: SubscriptionDelivery.Limits
        /// The bound of each message: its values at the minimum rate, plus a floor.
        package var deadline: TransferDeadline
        /// How long a central that wrote a HELLO has to answer the handshake's first message
        /// (nobody is authenticated before: the message's deadline is too long).
        package var handshakeTimeout: Duration
        package var progressInterval: Duration
        package var sessionMessageLimit: Int
        package var sessionByteLimit: Int

        package init(delivery: SubscriptionDelivery.Limits, deadline: TransferDeadline, handshakeTimeout: Duration,
                     progressInterval: Duration, sessionMessageLimit: Int, sessionByteLimit: Int) {
            self.delivery = delivery
            self.deadline = deadline
            self.handshakeTimeout = handshakeTimeout
            self.progressInterval = progressInterval
            self.sessionMessageLimit = sessionMessageLimit
            self.sessionByteLimit = sessionByteLimit
        }
    }

    /// A message with the run's number for it.
    package struct Offer: Sendable, Hashable {
        package var message: OutgoingMessage
        package var sequence: Int

        package init(_ message: OutgoingMessage, sequence: Int) {
            self.message = message
            self.sequence = sequence
        }
    }

    /// The delivery's timers and the handshake's bound. A timer firing with another generation
    /// than the one armed (cancelled or restarted since) changes nothing.
    package enum TimerKind: Sendable, Hashable, CaseIterable {
        case delivery(SubscriptionDelivery.Timer)
        case handshake

        package static var allCases: [TimerKind] { SubscriptionDelivery.Timer.allCases.map(TimerKind.delivery) + [.handshake] }
    }

    package struct TimerID: Sendable, Hashable {
        package var kind: TimerKind
        package var generation: Int
    }

    /// What the connection asks of the message source, answered in order by the shell.
    package enum SourceRequest: Sendable, Hashable {
        /// After a multi session's ACK was counted: the next message ready now (`nextMessage`).
        case nextAvailable
        /// The message after the current one and the `skipping` ones sent ahead, ready now
        /// (`upcoming`): the pipeline sends it before the current one's ACK.
        case upcoming(skipping: Int)
        /// The same, only to have it read and hashed while the window is full; not answered.
        case prepare(skipping: Int)
    }

    package enum Input: Sendable, Hashable {
        /// The link took the value last handed to it (`send`).
        case sent
        /// Sending or draining failed: the link is gone (`closedByPeer`) or was stopped.
        case sendFailed(SubscriptionDelivery.TransferFailure)
        /// After `drain`: bluetoothd took everything sent.
        case drained
        /// The central confirmed an indication (a `Confirm` call, or a byte on the socket).
        case confirmed
        /// The central wrote this value while subscribed (a GATT write, or an SDU).
        case written([UInt8])
        /// The central left. `drainedWhenClosed`: we closed the channel for it, and bluetoothd had
        /// taken everything sent by then (nil: we did not close it).
        case hungUp(reason: String, drainedWhenClosed: Bool?)
        case timerFired(TimerID)
        /// The source's answer to `nextAvailable` (nil: none ready now).
        case nextMessage(Offer?)
        /// The source's answer to `upcoming` (nil: none ready now).
        case upcoming(OutgoingMessage?)
        /// Answers `checkBluetooth`: up, and why the link may reorder Apple's values (nil: cannot; a reason stays).
        case bluetoothChecked(up: Bool, reorderRisk: String?)
        /// Answers `readPayload`: the file's bytes at `offset`, or why they could not be read.
        case payloadRead(offset: Int, bytes: [UInt8])
        case payloadUnreadable(String)
        /// Another central was refused while this one is served: it waits for its turn.
        case centralTurnedAway
        /// Everything ends (adapter off, run over).
        case shutDown(reason: String)
    }

    /// What the shell reports, naming this connection's central.
    package enum Report: Sendable, Hashable {
        case progress(TransferProgress, bytesPerSecond: Double?, secondsRemaining: Double?)
        /// The message under way stopped before it counted.
        case aborted(String)
        /// The central was refused or missed a bound.
        case dropped(String)
        case warning(String)
        /// Log lines at debug and info level.
        case debug(String)
        case info(String)
    }

    package enum Action: Sendable, Equatable {
        /// Hand this value to the link; `sent` (or `sendFailed`) follows.
        case send([UInt8])
        /// Wait until bluetoothd took everything sent; `drained` (or `sendFailed`) follows.
        case drain
        /// Read these bytes of the file (off the shared pool); `payloadRead`/`payloadUnreadable` follows.
        case readPayload(MessagePayload, Range<Int>)
        /// Close our end of the link (a pending send fails).
        case closeChannel
        case ask(SourceRequest)
        /// The message counts as delivered (the only place one is counted): the source is told, the
        /// run counts it, the event says so. `engineOffersNext`: a one-message connection's, after
        /// which the engine offers the next message (a multi session asks the source itself).
        case deliver(Offer, MessageSummary, engineOffersNext: Bool)
        /// Payload bytes put on the air since the last tally (its delivery summary shows all visits').
        case tallyOnAir(digest: [UInt8], bytes: Int)
        case report(Report)
        /// Said once per run: a key no authorized-peers file lists was let in.
        case noticeUnauthenticated(AuthenticatedPeer)
        /// An authorized central was refused the message under way (for another): the engine may offer it its own next.
        case addressedElsewhere(AuthenticatedPeer)
        case startTimer(TimerID, after: Duration)
        case cancelTimer(TimerID)
        /// Read whether Bluetooth is up and the link's reordering risk; feed `bluetoothChecked`.
        case checkBluetooth
        /// Drop the central's link (it missed a bound or was refused).
        case disconnect
        /// The connection is over; `announce`: the characteristic is free again.
        case end(announce: Bool)
    }

    package let peer: PeerDescription
    package let format: TransferFormat
    package let overChannel: Bool
    package let confirmsIndications: Bool
    package let valueLength: Int
    let settings: Settings
    /// The policy's whole list, to tell an authorized central refused an addressed message.
    let authorizedPeers: AuthorizedPeers

    /// The message under way (in a multi session, the current one).
    package internal(set) var current: Offer
    /// Whether it counts, and what the central must do next.
    package internal(set) var delivery: SubscriptionDelivery
    var startedAt: Duration
    var progress: ProgressReports
    package internal(set) var share: SessionShare
    package internal(set) var resumedFrom: Int?
    package internal(set) var authenticatedPeer: AuthenticatedPeer?
    /// Why Apple's values may reach this central out of order (sticky once seen).
    var reorderRisk: String?

    var stream: Stream
    var transfer = TransferPhase.streaming
    /// Indications sent and not yet confirmed.
    var unconfirmed = 0
    /// The delivery stopped the wait for confirmations (a hang-up's grace ran out).
    var confirmationsFinished = false
    /// The central's writes not read yet: while a value is with the link or the source answers,
    /// and after a one-message session's `EOM` until drained.
    var heldWrites: [[UInt8]] = []
    /// What a write of the central meant and was not acted on yet (the source answers first).
    var heldEvents: [SecureSenderSession.Event] = []
    /// The source's answer this connection waits for, and what it is for.
    var awaiting: AwaitedAnswer?
    /// A read of the payload's file was asked for and not answered yet.
    var payloadAsked = false
    var pipeline = PipelineState()
    /// The session's payload bytes on the air seen so far, and those not tallied yet (`tallyOnAir`
    /// when the message is delivered, left or ended).
    var onAirTallied = 0
    var onAirPending = 0
    /// The message taken from the source and not delivered (still offered at the end), and the numbers delivered.
    package internal(set) var offerTaken: Offer?
    package internal(set) var deliveredSequences: [Int] = []

    var armed: [TimerKind: Int] = [:]
    var nextGeneration = 0
    package internal(set) var isOver = false

    /// Apple's values, or the encrypted session.
    enum Stream: Sendable {
        case compat(MessageSender)
        case secure(SecureSenderSession)
        /// Taken out while it changes, so that it has one owner (a copy would copy its buffers).
        case taken
    }

    /// Where the values stand, as a transfer task running beside the link would.
    enum TransferPhase: Sendable, Equatable {
        /// Between two values: the next may go, the central's writes are read.
        case streaming
        case sending
        /// The link took it; its confirmation is awaited (indications).
        case confirming
        /// `EOM` is out; the drain was asked for.
        case draining
        /// One-message session after `EOM`: only the central's writes matter (its ACK).
        case readingWrites
        /// Nothing more is sent or read.
        case done
    }

    struct PipelineState: Sendable {
        /// Multi: the message whose END bluetoothd took; its ACK is awaited.
        var endWritten: UInt32?
        /// The messages sent after the one awaiting its ACK, oldest first, with their numbers.
        var sentAhead: [(message: OutgoingMessage, number: UInt32)] = []
        /// The message numbers for which the source was asked what follows, and to prepare.
        var askedUpcoming: UInt32?
        var preparedAhead: UInt32?
        /// One-message session: the central acknowledged before the bare `EOM` went out.
        var acknowledgedBeforeEndOfMessage = false
    }

    /// The source's answer awaited, with what the connection will do with it.
    enum AwaitedAnswer: Sendable {
        /// After a multi ACK: the next message for `continuation`; `sentAhead`: the one under way.
        case next(SessionContinuation, sentAhead: (message: OutgoingMessage, number: UInt32, endWritten: Bool)?,
                  centralClosed: Bool, hangUpReason: String?)
        case upcoming
    }

    /// What a central wrote before it subscribed.
    package enum CentralHello: Sendable, Hashable {
        /// No HELLO: Apple's flow.
        case none
        case retired
        case version2(HelloV2)
    }

    package struct Link: Sendable, Hashable {
        /// The longest value, `--value-size` applied for GATT.
        package var valueLength: Int
        package var overChannel: Bool
        package var indications: Bool

        package init(valueLength: Int, overChannel: Bool, indications: Bool) {
            self.valueLength = valueLength
            self.overChannel = overChannel
            self.indications = indications
        }
    }

    package struct Keys: Sendable {
        package var identity: HostIdentity
        package var authorizedPeers: AuthorizedPeers
        package var requiresSecure: Bool

        package init(identity: HostIdentity, authorizedPeers: AuthorizedPeers, requiresSecure: Bool) {
            self.identity = identity
            self.authorizedPeers = authorizedPeers
            self.requiresSecure = requiresSecure
        }
    }

    /// How a connection starts: refused (one line, nothing sent, the link dropped) or served.
    package enum Start: Sendable {
        case refused(String)
        case started(SenderConnection, [Action])
    }
}
