import Transfer
import Trust

/// One visit of the central to a sender, once subscribed, as a pure machine: the shell (`ReceiverVisitShell` in Roles)
/// hands it what arrives (values, the link's end, ticks, answers) and performs the effects it returns, in order.
///
/// It owns what a visit decides: each message's assembly (`MessageAssembly`), whether a message is stored already
/// (this sender's unconfirmed ACKs of earlier visits, `StoredMessages`), how each ACK is written and what shows it
/// arrived (`AcknowledgementPlan`, `UnconfirmedAcknowledgements`), and the room a message needs. No clock (the shell
/// gives the time since subscribing), no I/O; while it waits for an answer, it asks for nothing else.
package struct ReceiverVisit: Sendable {
    package struct Facts: Sendable {
        package var peer: PeerDescription
        /// Over an L2CAP channel: every write is an SDU, nothing answers it.
        package var overChannel: Bool
        /// The write type the characteristic offers for the ACK is a command.
        package var offeredAsCommand: Bool
        package var commandAllowed: Bool
        /// Messages the run wants in all (nil: every one), and how many it has.
        package var messageCount: Int?
        package var receivedBefore: Int

        package init(peer: PeerDescription, overChannel: Bool, offeredAsCommand: Bool, commandAllowed: Bool,
                     messageCount: Int?, receivedBefore: Int) {
            self.peer = peer
            self.overChannel = overChannel
            self.offeredAsCommand = offeredAsCommand
            self.commandAllowed = commandAllowed
            self.messageCount = messageCount
            self.receivedBefore = receivedBefore
        }
    }

    /// Why a message cannot be kept: the bound (its option's name) and why, in words.
    package struct RoomRefusal: Sendable, Equatable {
        package var bound: String
        package var reason: String

        package init(bound: String, reason: String) {
            self.bound = bound
            self.reason = reason
        }
    }

    package enum StoreOutcome: Sendable, Equatable {
        /// Stored now, under the run's number `sequence`, at `path` (nil: no such place).
        case stored(sequence: Int, at: String?)
        /// An earlier run stored it (the receipt journal knows), at `path`.
        case storedBefore(at: String?)
        /// The sink could not store it; the sender keeps it.
        case refused(String)
    }

    package enum Input: Sendable, Equatable {
        case transfer(TransferInput)
        /// The answer to `checkRoom`: why the message cannot be kept (nil: it can).
        case room(RoomRefusal?)
        case stored(StoreOutcome)
        /// The answer to `writeAcknowledgement`: nil when written, or why not.
        case acknowledgementWritten(failure: String?)
        /// The answer to `awaitSenderClose`: whether the sender closed the channel in time.
        case senderClosed(Bool)
        case writeFailed(String)
        /// Answers `lookUpCheckpoint`: bytes the spool held (0: none), now where the message's go, and their SHA-256.
        case checkpointHeld(bytes: Int, digest: RunningDigest?)
        /// The shell could not keep the message's bytes (a partial file that failed).
        case payloadNotKept(String)
    }

    /// What the shell reports, naming this visit's sender.
    package enum Report: Sendable, Equatable {
        /// The subscription's format is known (said once a visit).
        case subscribed(TransferFormat)
        case progress(MessageAssembly.ProgressReport)
        /// A message stored now; `storedAt`: where.
        case received(MessageSummary, storedAt: String?)
        case warning(String)
        /// A key no authorized-peers file lists was let in (said once per run).
        case unauthenticated(AuthenticatedPeer)
    }

    package enum Action: Sendable, Equatable {
        /// Write this value (message 2, RESUME, PROGRESS); `unanswered`: no reply awaited, it may be a write command.
        case write([UInt8], unanswered: Bool)
        case checkpoint(MessageAssembly.CheckpointWork)
        /// Keep a secure message's bytes (memory, partial file): every byte the shell stores is one these gave.
        case keepPayload(MessageAssembly.PayloadWork)
        /// Put the bytes of a checkpoint of this message where its bytes go; `checkpointHeld` answers.
        case lookUpCheckpoint(sender: PeerKey?, header: MessageHeader)
        /// Can the message be kept? `room` answers.
        case checkRoom(RoomQuestion)
        /// Store this verified message for `sender` (the receipt journal's name); `stored` answers.
        case store(ReceivedMessage, sender: String)
        /// Write the sealed ACK's values; `asCommand`: as write commands; `settles`: wait a moment
        /// afterwards (a Disconnect may overtake a queued command). `acknowledgementWritten` answers.
        case writeAcknowledgement([[UInt8]], asCommand: Bool, settles: Bool)
        /// The sender has this ACK: the receipt journal may forget the message a while later.
        case forgetReceipt(sender: String, digest: [UInt8])
        case countReceived
        /// Over a channel: wait (bounded) for the sender to close it; answered by `senderClosed`.
        case awaitSenderClose
        case report(Report)
        /// The visit is over: `failure` says why it did not end well (nil: it did).
        case finish(failure: TransferFailure?)
    }

    /// What a message stored (or found stored) leaves for its ACK and its report.
    struct Taken: Sendable, Equatable {
        var message: ReceivedMessage
        var duration: Duration
        /// The sender as the receipt journal names it.
        var sender: String
        /// The copy stored before (this run, or an earlier one), when the message came again.
        var earlierCopy: UnacknowledgedMessage?
        var storedByEarlierRun = false
        var sequence = 0
        var storedAt: String?
        var storedWhere: String? { storedAt ?? earlierCopy?.storedAt }
    }

    enum Pending: Sendable, Equatable {
        /// A checkpoint; then `step` is acted on (after a room check when a value gave it).
        case checkpoint(MessageAssembly.Step, afterValue: Bool)
        /// Room for the message under way; then `step` is acted on.
        case room(MessageAssembly.Step)
        case storing(message: ReceivedMessage, duration: Duration, sender: String)
        case acknowledging(Taken, AcknowledgementPlan)
        case senderClose
    }

    package let facts: Facts
    package internal(set) var assembly: MessageAssembly
    /// This sender's stored messages with unconfirmed ACKs, from earlier visits (the run's, handed back) and this one.
    package internal(set) var remembered: [UnacknowledgedMessage]
    var unconfirmed = UnconfirmedAcknowledgements()
    /// Over a channel, the last ACKs: confirmed once the sender closes it.
    package internal(set) var awaitingClose: [UnacknowledgedMessage] = []
    var admission = RoomCheck()
    var pending: Pending?
    var announced = false
    package internal(set) var received: Int
    package internal(set) var storedDigests: [[UInt8]] = []
    package internal(set) var isOver = false

    /// What the run keeps of this sender however the visit ends: what it remembered, and this visit's unconfirmed ACKs.
    package var rememberedNow: [UnacknowledgedMessage] {
        unconfirmed.pending.reduce(into: remembered) { messages, ack in
            StoredMessages.append(UnacknowledgedMessage(digest: ack.digest, storedAt: ack.storedAt), to: &messages)
        }
    }

    package init(facts: Facts, assembly: MessageAssembly, remembered: [UnacknowledgedMessage]) {
        self.facts = facts
        self.assembly = assembly
        self.remembered = remembered
        received = facts.receivedBefore
    }

    /// One input at `now` (since subscribing): the effects, in order; none once the visit is over.
    package mutating func handle(_ input: Input, at now: Duration) -> [Action] {
        guard !isOver else { return [] }
        var actions: [Action] = []
        switch input {
        case .transfer(let item):
            guard pending == nil else { break }
            let step = assembly.handle(item, at: now)
            let afterValue = if case .value = item { true } else { false }
            if let lookUp = takeWrites(&actions) {
                pending = .checkpoint(step, afterValue: afterValue)
                actions.append(.lookUpCheckpoint(sender: lookUp.sender, header: lookUp.header))
            } else {
                proceed(with: step, afterValue: afterValue, &actions, at: now)
            }
        case .checkpointHeld(let held, let digest):
            guard case .checkpoint(let step, let afterValue) = pending else { break }
            pending = nil
            let resumed = held > 0 ? digest.flatMap { assembly.resume(heldBytes: held, digest: $0, at: now) } : nil
            _ = takeWrites(&actions)
            if case .failed(let failure)? = resumed {
                finish(failure, &actions)
            } else {
                proceed(with: step, afterValue: afterValue, &actions, at: now)
            }
        case .payloadNotKept(let reason):
            finish(.transient("secure session failed: the message could not be kept: \(reason)"), &actions)
        case .room(let refusal):
            guard case .room(let step) = pending else { break }
            pending = nil
            if let refusal {
                finish(.refused(bound: refusal.bound, reason: refusal.reason), &actions)
            } else {
                act(on: step, &actions, at: now)
            }
        case .stored(let outcome):
            stored(outcome, &actions, at: now)
        case .acknowledgementWritten(let failure):
            acknowledgementWritten(failure: failure, &actions, at: now)
        case .senderClosed(let closed):
            guard pending == .senderClose else { break }
            pending = nil
            senderClosed(closed, &actions)
        case .writeFailed(let reason):
            finish(.transient("writing to the sender failed: \(reason)"), &actions)
        }
        return actions
    }

    /// The session's writes, after the payload and spool work; a checkpoint to look up is returned to be asked last.
    mutating func takeWrites(_ actions: inout [Action]) -> (sender: PeerKey?, header: MessageHeader)? {
        for work in assembly.takePayloadWork() { actions.append(.keepPayload(work)) }
        var lookUp: (sender: PeerKey?, header: MessageHeader)?
        for work in assembly.takeCheckpointWork() {
            if case .lookUp(let sender, let header) = work { lookUp = (sender, header) } else { actions.append(.checkpoint(work)) }
        }
        for write in assembly.takeWrites() { actions.append(.write(write.value, unanswered: write.unanswered)) }
        return lookUp
    }

    /// After a value, room for the message is checked (when due) before its step is acted on.
    mutating func proceed(with step: MessageAssembly.Step, afterValue: Bool, _ actions: inout [Action], at now: Duration) {
        if afterValue, let question = admission.due(assembly, at: now) {
            pending = .room(step)
            actions.append(.checkRoom(question))
        } else {
            act(on: step, &actions, at: now)
        }
    }

    /// Acts on the assembly's step (and on what followed a completed message in the values read)
    /// until the visit waits for an input or an answer.
    mutating func act(on step: MessageAssembly.Step, _ actions: inout [Action], at now: Duration) {
        forgetConfirmedReceipts(&actions)
        switch step {
        case .proceed(let report):
            if let report { actions.append(.report(.progress(report))) }
        case .formatDetected(let format, let report):
            announce(format, &actions)
            if let report { actions.append(.report(.progress(report))) }
        case .complete(let message, let duration):
            // A message whole in its first values completes before the subscription was announced.
            announce(message.format, &actions)
            take(message, duration: duration, &actions, at: now)
        case .sessionEnded:
            sessionOver(&actions)
        case .failed(let failure):
            finish(failure, &actions)
        }
    }

    private mutating func announce(_ format: TransferFormat, _ actions: inout [Action]) {
        guard !announced else { return }
        announced = true
        actions.append(.report(.subscribed(format)))
    }

    /// The receipts of ACKs the sender has now confirmed are forgotten.
    private mutating func forgetConfirmedReceipts(_ actions: inout [Action]) {
        actions += unconfirmed.takeConfirmed(by: assembly).map { .forgetReceipt(sender: $0.sender, digest: $0.digest) }
    }

    /// The stream ended (or we closed with our last ACK): over a channel, the sender's close confirms the last ACKs.
    mutating func sessionOver(_ actions: inout [Action]) {
        forgetConfirmedReceipts(&actions)
        guard awaitingClose.isEmpty else {
            pending = .senderClose
            actions.append(.awaitSenderClose)
            return
        }
        finish(nil, &actions)
    }

    /// Over a channel our last ACK has no reply: the sender's close after reading it confirms it.
    /// Without it the messages may come again and are remembered as stored.
    private mutating func senderClosed(_ closed: Bool, _ actions: inout [Action]) {
        for message in awaitingClose {
            if closed {
                if let sender = message.sender { actions.append(.forgetReceipt(sender: sender, digest: message.digest)) }
            } else {
                StoredMessages.append(message, to: &remembered)
            }
        }
        awaitingClose = []
        finish(nil, &actions)
    }

    /// The visit is over: the unconfirmed are remembered, so a message sent again is not stored twice.
    mutating func finish(_ failure: TransferFailure?, _ actions: inout [Action]) {
        remembered = rememberedNow
        unconfirmed.pending = []
        pending = nil
        isOver = true
        actions.append(.finish(failure: failure))
    }
}

/// What a room check asks of where messages go (the shell answers with the sink's own checks).
package enum RoomQuestion: Sendable, Equatable {
    /// A message announced this many bytes: may it come at all (its resume copy counted)?
    case announced(Int)
    /// The reserve again before a write (`received` of `announced` came; others fill the disk too).
    case writing(announced: Int, received: Int)
    /// A message without a length (Apple's flow, held in memory): may this much be kept?
    case received(Int)
}

/// Room on disk for a visit's messages: a framed one for its announced length (and the spool's
/// copy) before any payload, then the reserve after each value; a compat one (no length) about
/// once a second with what came. Refused, the link drops before EOM: the sender keeps its copy.
struct RoomCheck: Sendable, Equatable {
    private var admittedAnnouncement = false
    private var lastCheck: Duration?

    mutating func due(_ assembly: MessageAssembly, at now: Duration) -> RoomQuestion? {
        guard !assembly.finished else { return nil }
        if let announced = assembly.announcedLength {
            guard admittedAnnouncement else {
                admittedAnnouncement = true
                return .announced(announced)
            }
            return .writing(announced: announced, received: assembly.bytesReceived)
        }
        if lastCheck.map({ now - $0 >= .seconds(1) }) ?? true {
            lastCheck = now
            return .received(assembly.bytesReceived)
        }
        return nil
    }

    /// The next message of the session announces its own length.
    mutating func nextMessage() {
        admittedAnnouncement = false
    }
}
