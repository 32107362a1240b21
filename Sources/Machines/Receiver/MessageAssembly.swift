import Transfer
import Trust

/// The receiving half of one subscription, without I/O: values, ends and ticks in (with the time since subscribing),
/// the central's next step out. Adds to ``MessageReceiver`` idle timeout, progress throttling, rate and ETA.
package struct MessageAssembly: Sendable {
    package enum Step: Sendable, Equatable {
        /// Keep listening; report this progress when non-nil.
        case proceed(progress: ProgressReport?)
        case formatDetected(TransferFormat, progress: ProgressReport?)
        /// `EOM` came and the message verified; with `multi`, its END did and more may follow (`expectsMoreMessages`).
        case complete(ReceivedMessage, duration: Duration)
        /// Multi: the sender closed the session (CLOSE, `EOM`) after its last message.
        case sessionEnded
        /// The transfer cannot end well; nothing of it may be kept.
        case failed(TransferFailure)
    }

    package struct ProgressReport: Sendable, Equatable {
        package var progress: TransferProgress
        package var bytesPerSecond: Double?
        package var secondsRemaining: Double?
    }

    package let idleTimeout: Duration
    /// The slowest transfer kept going after `rateGrace`, in payload bytes per second since
    /// subscribing (0: no floor). Unlike the idle timer this counts from the subscription, so a
    /// trickling peer cannot hold the central longer than `rateGrace + size / minimumRate`.
    package let minimumRate: Int
    package let rateGrace: Duration
    /// How long an `EOM` that came before the format was told waits for a framed sender's first value; then it is
    /// read as compat (a peer that ignored the HELLO sent an empty message). Generous: reordering costs milliseconds.
    package let undecidedSettle: Duration
    /// Progress is reported at most this often (and always for the last value before `EOM`).
    package let progressInterval: Duration
    private var receiver: MessageReceiver
    /// The session answering our version-2 HELLO (used once `mode` says the peer speaks it).
    private var secure: SecureReceiverSession?
    private let requiresSecure: Bool
    /// Resume: an unfinished message's authenticated prefix is kept as it comes; false: no checkpoints, no `resume`.
    private let keepsCheckpoints: Bool
    private var checkpointWork: [CheckpointWork] = []
    /// Secure mode: the sender's key and the current message's HEADER (its spool entry).
    private var senderKey: PeerKey?
    private var currentHeader: MessageHeader?
    /// Resume: the offset the current message continued from.
    package private(set) var resumedFrom: Int?
    private var mode: Mode
    /// Values that came before the one that tells the mode (EATT may reorder the first ones).
    private var undecidedValues: [[UInt8]] = []
    private var pendingWrites: [PendingWrite] = []
    package private(set) var authenticatedSender: AuthenticatedPeer?
    private var secureAnnouncedLength: Int?
    private var secureBytesReceived = 0
    private var secureValuesReceived = 0
    /// A HEADER came and its message has not completed yet.
    private var messageUnderWay = false
    /// Multi: payload bytes of earlier messages of this session (for the rate).
    private var secureBytesOfEarlierMessages = 0
    /// Multi: when the current message's first value came (its duration counts from there).
    private var messageStartedAt: Duration?
    /// The message END verified, complete once the stream's `EOM` arrives.
    private var verifiedMessage: ReceivedMessage?
    private var meter: ProgressMeter?
    private var lastActivity: Duration = .zero
    private var firstValueAt: Duration?
    private var undecidedEndOfMessageAt: Duration?
    private var lastProgressAt: Duration?
    package private(set) var finished = false

    private enum Mode: Sendable, Equatable {
        /// A version-2 HELLO was written: the first values tell the secure stream from Apple's flow.
        case undecided
        /// Apple's flow, through `MessageReceiver`.
        case compat
        /// The framed protocol (always encrypted), through `SecureReceiverSession`.
        case secure
    }

    /// How many early values wait for one starting a version-2 stream before it is taken for compat.
    package static let undecidedValueLimit = 8

    /// `secure`: the session for the version-2 HELLO we wrote (nil: none); `requiresSecure`: other answers are refused.
    package init(limits: TransferLimits, idleTimeout: Duration, minimumRate: Int = 0,
         rateGrace: Duration = .seconds(20), progressInterval: Duration = .milliseconds(200),
         undecidedSettle: Duration = .milliseconds(1500), secure: SecureReceiverSession? = nil,
         requiresSecure: Bool = false, keepsCheckpoints: Bool = false) {
        self.keepsCheckpoints = keepsCheckpoints
        receiver = MessageReceiver(limits: limits)
        self.secure = secure
        self.requiresSecure = requiresSecure
        mode = secure == nil ? .compat : .undecided
        self.idleTimeout = idleTimeout
        self.minimumRate = max(0, minimumRate)
        self.rateGrace = rateGrace
        self.undecidedSettle = undecidedSettle
        self.progressInterval = progressInterval
    }

    package var valuesReceived: Int { mode == .secure ? secureValuesReceived : receiver.valuesReceived + undecidedValues.count }
    package var bytesReceived: Int { mode == .secure ? secureBytesReceived : receiver.progress.bytesSoFar }
    /// The payload length a HEADER announced; nil before it (or for compat).
    package var announcedLength: Int? { mode == .secure ? secureAnnouncedLength : nil }
    /// The transfer runs in the secure format: its ACK is a sealed record.
    package var isSecure: Bool { mode == .secure }
    /// The sender chose `pipeline`: its next message may come while this side stores the last one.
    package var pipelines: Bool { mode == .secure && (secure?.pipelines ?? false) }
    /// The message whose HEADER came last (nil: none). With `pipeline`, HEADER m shows the sender had ACK m − 2.
    package private(set) var highestHeaderNumber: UInt32?
    /// The sender's CLOSE came; it sends one only once every message is acknowledged.
    package private(set) var senderClosed = false
    package var currentMessageNumber: UInt32? { currentHeader?.message }
    /// The session is (or, once the prefix is read, will be) secure: the HELLO offered it and the prefix chose it.
    private var offeredSecureOrChoseIt: Bool {
        guard let secure else { return false }
        return secure.hasReadPrefix ? secure.isSecure : secure.offersSecure
    }

    /// A `multi` session that has not ended: after a `.complete`, the next message or CLOSE follows.
    package var expectsMoreMessages: Bool { mode == .secure && !finished && (secure?.carriesSeveralMessages ?? false) }

    /// A value the session wrote, and whether anything waits for its reply.
    package struct PendingWrite: Sendable, Equatable {
        package var value: [UInt8]
        /// PROGRESS: nothing waits for it, so it may go as a write command (a write request would
        /// hold up reading for a round trip at every report).
        package var unanswered: Bool
    }

    /// The values to write to the peer now, in order (message 2, a RESUME, PROGRESS reports).
    package mutating func takeWrites() -> [PendingWrite] {
        defer { pendingWrites = [] }
        return pendingWrites
    }

    /// Resume: what the spool is to do with an unfinished message's prefix, from the inputs since the last call; done
    /// before acting on their step (a completed message's checkpoint goes before the message is stored).
    package enum CheckpointWork: Sendable, Equatable {
        /// Keep `bytes`, which continue the message of `header` at `offset`.
        case append(sender: PeerKey?, header: MessageHeader, offset: Int, bytes: [UInt8])
        /// The checkpoint of the message of `header` is of no more use (complete, or bad).
        case remove(sender: PeerKey?, header: MessageHeader)
        /// Is its checkpoint spooled? Answered by `resume(heldBytes:digest:at:)`, the bytes where the message's go.
        case lookUp(sender: PeerKey?, header: MessageHeader)
    }

    package mutating func takeCheckpointWork() -> [CheckpointWork] {
        defer { checkpointWork = [] }
        return checkpointWork
    }

    /// What the shell keeps of a secure message's bytes: the assembly holds none (the body stays
    /// empty until the shell, which kept them, fills it in to store it).
    package enum PayloadWork: Sendable, Equatable {
        /// A message of `header` begins: a place for its bytes (memory, or a partial file).
        case begin(MessageHeader)
        /// Its bytes at `offset`, in order (a checkpoint's put there first).
        case write(offset: Int, bytes: [UInt8])
    }

    private var payloadWork: [PayloadWork] = []

    package mutating func takePayloadWork() -> [PayloadWork] {
        defer { payloadWork = [] }
        return payloadWork
    }

    /// Resume: the shell put the checkpoint's first `heldBytes` bytes where the message's go, with
    /// their SHA-256 state: the session writes its RESUME. Nil: nothing to act on.
    package mutating func resume(heldBytes: Int, digest: RunningDigest, at time: Duration) -> Step? {
        guard !finished, mode == .secure, var session = secure.take() else { return nil }
        let events: [SecureReceiverSession.Event]
        do {
            events = try session.resume(heldBytes: heldBytes, digest: digest)
        } catch {
            secure = session
            return ending(.failed(Self.failure(error)))
        }
        secure = session
        stashedEvents = events + stashedEvents
        return handleSecure([], at: time)
    }

    /// A prefix is kept once the handshake named its sender: the spool files it under that key.
    private var keepsCheckpointNow: Bool { keepsCheckpoints && senderKey != nil }

    /// After the message was stored: the values of the sealed ACK (`alreadyStored`: outcome 01).
    /// `closing` (multi, the last wanted message): a CLOSE `01` goes with it; the session is over.
    package mutating func secureAcknowledgement(alreadyStored: Bool, closing: Bool = false) throws(SecureSessionError) -> [[UInt8]] {
        guard mode == .secure, var session = secure.take() else { return [] }
        defer { secure = session }
        let close = closing && session.carriesSeveralMessages
        if close { finished = true }
        return try session.acknowledgement(outcome: alreadyStored ? 0x01 : 0x00, closingWith: close ? 0x01 : nil)
    }

    package func rateShortfall(at time: Duration) -> TransferFailure? {
        guard minimumRate > 0, time > rateGrace else { return nil }
        let owed = Double(minimumRate) * (time - rateGrace).seconds
        let received = bytesReceived + (mode == .secure ? secureBytesOfEarlierMessages : 0)
        guard Double(received) < owed else { return nil }
        return .refused(
            bound: "min-rate",
            reason: "too slow: \(bytesReceived) bytes in \((time.seconds * 10).rounded() / 10) s, "
                + "below \(minimumRate) bytes/s after \(Self.describe(rateGrace)) (--min-rate)")
    }

    package mutating func handle(_ input: TransferInput, at time: Duration) -> Step {
        guard !finished else { return .proceed(progress: nil) }
        switch input {
        case .tick:
            if mode == .undecided, let endedAt = undecidedEndOfMessageAt, time - endedAt >= undecidedSettle {
                return settleAsCompat(at: time)
            }
            if let shortfall = rateShortfall(at: time) { return ending(.failed(shortfall)) }
            if time - lastActivity >= idleTimeout {
                finished = true
                let detail = valuesReceived == 0
                    ? "no notification within \(Self.describe(idleTimeout)) of subscribing"
                    : "no notification for \(Self.describe(idleTimeout)) (\(bytesReceived) bytes received, no end marker)"
                return .failed(.transient("the peripheral stalled: \(detail)"))
            }
            return .proceed(progress: nil)

        case .ended(let reason):
            finished = true
            if mode == .secure && authenticatedSender == nil && offeredSecureOrChoseIt {
                // A sender refuses an unlisted central right after reading its key (message 2).
                return .failed(.transient("\(reason) during the secure handshake: the sender may not list this "
                                          + "host's key ('bletransfer id' prints it)"))
            }
            if mode == .undecided && undecidedValues.isEmpty && !(secure?.offersSecure ?? true) {
                // A sender that requires the secure mode drops a central without keys at once.
                return .failed(.transient("\(reason) before sending anything: a sender that requires the secure mode "
                                          + "serves only hosts with keys ('bletransfer keygen', docs/trust.md)"))
            }
            if mode == .secure, !messageUnderWay, (secure?.completedCount ?? 0) > 0, secure?.carriesSeveralMessages == true {
                // Every message that began was stored and acknowledged: a sender hanging up now (before its CLOSE,
                // or with our last ACK on its way) loses nothing. Over, not failed: no abort, no back-off.
                return .sessionEnded
            }
            if mode == .secure {
                return .failed(.transient("\(reason) after \(bytesReceived) bytes of a secure transfer"))
            }
            if mode == .undecided, !undecidedValues.isEmpty || undecidedEndOfMessageAt != nil {
                return .failed(.transient("\(reason) before the message's format was known"))
            }
            let error = receiver.finishWithoutEOM()
            return .failed(.transient(error.map { "\($0) (\(reason))" } ?? reason))

        case .value(let value):
            lastActivity = time
            let first = firstValueAt == nil
            if first { firstValueAt = time }
            switch mode {
            case .compat:
                return handlePlain(value, first: first, at: time)
            case .secure:
                return handleSecure([value], at: time)
            case .undecided:
                return decide(value, at: time)
            }
        }
    }

    /// A version-2 HELLO was written: a value starting a version-2 stream selects the secure session; version 1 is
    /// refused; a value no version-2 sender sends first, or too many without it, select Apple's flow (or, if secure
    /// is required, a refusal). `EOM` alone decides nothing: it may have overtaken a short stream's first value.
    private mutating func decide(_ value: [UInt8], at time: Duration) -> Step {
        if SecureReceiverSession.startsVersion2Stream(value) {
            mode = .secure
            let held = undecidedValues
            undecidedValues = []
            let step = handleSecure([value] + held, at: time)
            if case .proceed(let progress) = step { return .formatDetected(.secure, progress: progress) }
            return step
        }
        if RetiredVersion1.startsStream(value) {
            return ending(.failed(Self.version1Refusal))
        }
        if value == WireFormat.endOfMessage, undecidedEndOfMessageAt == nil {
            undecidedEndOfMessageAt = time
            undecidedValues.append(value)
            return .proceed(progress: nil)
        }
        if undecidedEndOfMessageAt != nil, Self.cannotBeVersion2(value) {
            // No sender sends this after its `EOM`.
            return ending(.failed(TransferFailure(.valueAfterEndOfMessage)))
        }
        undecidedValues.append(value)
        guard Self.cannotBeVersion2(value) || (undecidedValues.count >= Self.undecidedValueLimit && undecidedEndOfMessageAt == nil)
        else { return .proceed(progress: nil) }
        return replayAsCompat(at: time)
    }

    /// `EOM` came undecided and nothing followed for `undecidedSettle`: an empty (or short) message
    /// in Apple's flow. Values after the `EOM` mean a secure stream whose first value never came.
    private mutating func settleAsCompat(at time: Duration) -> Step {
        guard undecidedValues.last == WireFormat.endOfMessage else {
            return ending(.failed(TransferFailure(.missingStartOfMessage(valuesReceived: valuesReceived))))
        }
        return replayAsCompat(at: time)
    }

    /// Apple's flow: the values held so far, in order, go to `MessageReceiver`.
    private mutating func replayAsCompat(at time: Duration) -> Step {
        if requiresSecure {
            return ending(.failed(.refused(bound: "authorized-peers",
                                           reason: "it answered without the secure mode (Apple's format); "
                                               + "this receiver takes messages from authorized peers only")))
        }
        mode = .compat
        let held = undecidedValues
        undecidedValues = []
        var last: Step = .proceed(progress: nil)
        for (index, value) in held.enumerated() {
            last = handlePlain(value, first: index == 0, at: time)
            switch last {
            case .failed, .complete: return last
            default: continue
            }
        }
        // The format was told by the first held value: say it even when later ones followed.
        if case .proceed(let progress) = last { return .formatDetected(.compat, progress: progress) }
        return last
    }

    /// A value no version-2 sender sends: too short for a sequence number and a piece, sequence 0
    /// without the prefix, or a sequence beyond the reorder window (no value overtaking the first
    /// has one). A peer that ignored the HELLO is thereby told at its first value.
    package static func cannotBeVersion2(_ value: [UInt8]) -> Bool {
        guard value.count > 2 else { return true }
        let sequence = Int(value[0]) << 8 | Int(value[1])
        return sequence == 0 || sequence >= SequencedStream.reorderWindow
    }

    /// Multi with `pipeline`: what came after a `.complete` in the same values, taken up by
    /// `continueAfterMessage` once that message is stored and acknowledged.
    private var stashedValues: [[UInt8]] = []
    private var stashedEvents: [SecureReceiverSession.Event] = []

    /// After a multi `.complete` was stored and acknowledged: the step for what followed it in values read (nil: none).
    package mutating func continueAfterMessage(at time: Duration) -> Step? {
        guard !finished, mode == .secure, !stashedValues.isEmpty || !stashedEvents.isEmpty else { return nil }
        return handleSecure([], at: time)
    }

    private mutating func handleSecure(_ values: [[UInt8]], at time: Duration) -> Step {
        // Taken out, not copied: while `secure` still held it, the session's payload buffer
        // had two owners and every value appended copied the whole message so far (quadratic).
        guard var session = secure.take() else { return .failed(.transient("no secure session")) }
        defer { secure = session }
        var progressed = false
        stashedValues += values
        while !stashedEvents.isEmpty || !stashedValues.isEmpty {
            if stashedEvents.isEmpty {
                let value = stashedValues.removeFirst()
                secureValuesReceived += 1
                do {
                    stashedEvents = try session.receiveNotification(value)
                } catch {
                    finished = true
                    stashedValues = []
                    return .failed(Self.failure(error))
                }
            }
            while !stashedEvents.isEmpty {
                switch apply(stashedEvents.removeFirst(), of: session, at: time) {
                case .next(let madeProgress): progressed = progressed || madeProgress
                case .step(let step): return step
                }
            }
        }
        if let shortfall = rateShortfall(at: time) { return ending(.failed(shortfall)) }
        guard progressed else { return .proceed(progress: nil) }
        return .proceed(progress: report(TransferProgress(bytesSoFar: secureBytesReceived, totalBytes: secureAnnouncedLength),
                                         first: false, at: time))
    }

    /// One session event went on (`progressed`: a report is due) or ended the step.
    private enum EventResult {
        case next(progressed: Bool)
        case step(Step)
    }

    private mutating func apply(_ event: SecureReceiverSession.Event, of session: SecureReceiverSession,
                                at time: Duration) -> EventResult {
        switch event {
        case .write(let write):
            pendingWrites.append(PendingWrite(value: write, unanswered: false))
        case .progressWrite(let write):
            pendingWrites.append(PendingWrite(value: write, unanswered: true))
        case .senderAuthenticated(let peer):
            authenticatedSender = AuthenticatedPeer(peer)
            senderKey = peer.key
        case .resumed(let offset):
            resumedFrom = offset
        case .appended(let offset, let bytes):
            payloadWork.append(.write(offset: offset, bytes: bytes))
            if keepsCheckpointNow, let currentHeader {
                checkpointWork.append(.append(sender: senderKey, header: currentHeader, offset: offset, bytes: bytes))
            }
        case .checkpointWanted(let header):
            if keepsCheckpointNow { checkpointWork.append(.lookUp(sender: senderKey, header: header)) }
        case .refusedDigestMismatch(let header):
            // The checkpoint (or what continued it) was bad: nothing of it is kept.
            if keepsCheckpointNow { checkpointWork.append(.remove(sender: senderKey, header: header)) }
            finished = true
            return .step(.failed(.transient("the resumed message did not verify (SHA-256); its checkpoint is discarded and nothing kept")))
        case .header(let header):
            payloadWork.append(.begin(header))
            messageUnderWay = true
            currentHeader = header
            highestHeaderNumber = max(highestHeaderNumber ?? 0, header.message)
            resumedFrom = nil
            secureAnnouncedLength = Int(clamping: header.payloadLength)
            secureBytesReceived = 0
            if session.completedCount > 0 { messageStartedAt = time }
            return .next(progressed: true)
        case .progress(let bytes):
            secureBytesReceived = bytes
            return .next(progressed: true)
        case .complete(let header):
            messageUnderWay = false
            // Verified: the central stores it next; its checkpoint is of no more use.
            if keepsCheckpointNow { checkpointWork.append(.remove(sender: senderKey, header: header)) }
            // Its bytes are the shell's (`PayloadWork`): the body is filled in there.
            var message = ReceivedMessage(body: MessagePayload([]), format: .secure, header: header)
            message.authenticatedSender = authenticatedSender?.keyLine
            message.file = header.metadata.map {
                SentFileAttributes(name: $0.name, modificationSeconds: $0.modificationSeconds,
                                   modificationNanoseconds: $0.modificationNanoseconds)
            }
            if session.carriesSeveralMessages {
                // Stored and acknowledged now; what followed it (with `pipeline`, the
                // next message may have) stays stashed for `continueAfterMessage`.
                secureBytesOfEarlierMessages += message.byteCount
                let startedAt = messageStartedAt ?? firstValueAt ?? time
                return .step(.complete(message, duration: time - startedAt))
            }
            verifiedMessage = message
            return .next(progressed: true)
        case .endOfStream where session.carriesSeveralMessages:
            finished = true
            guard session.completedCount > 0 else {
                return .step(.failed(.transient("the secure stream ended without a verified message")))
            }
            return .step(.sessionEnded)
        case .endOfStream:
            // The ACK follows `EOM`: the sender handed over its last value, so a hang-up after the ACK cuts nothing.
            finished = true
            guard let message = verifiedMessage else {
                return .step(.failed(.transient("the secure stream ended without a verified message")))
            }
            return .step(.complete(message, duration: time - (firstValueAt ?? time)))
        case .closed:
            senderClosed = true
        }
        return .next(progressed: false)
    }

    /// A sender that answered in the retired framed version 1: one line, nothing kept.
    package static let version1Refusal = TransferFailure.refused(
        bound: "framed-version",
        reason: "it answered in framed version 1, which this bletransfer no longer speaks; "
            + "update bletransfer on that host; nothing kept")

    package static func failure(_ error: SecureSessionError) -> TransferFailure {
        switch error {
        case .unauthorizedPeer(let key):
            return .refused(bound: "authorized-peers",
                            reason: "its key \(key.fingerprint) is not in the authorized peers; nothing kept")
        case .notSecure:
            return .refused(bound: "framed-version",
                            reason: "it answered the framed protocol without encryption, which this bletransfer no "
                                + "longer takes; update bletransfer on that host; nothing kept")
        case .tooLarge(let announced, let limit):
            return .corrupt(.announcedLengthExceedsLimit(announced: announced, limit: limit))
        case .digestMismatch:
            return .transient("the message did not verify (length or SHA-256); nothing kept")
        default:
            return .transient("secure session failed: \(error)")
        }
    }

    private mutating func report(_ progress: TransferProgress, first: Bool, at time: Duration) -> ProgressReport? {
        if meter == nil || meter?.totalBytes != progress.totalBytes {
            meter = ProgressMeter(totalBytes: progress.totalBytes)
        }
        meter?.record(bytesSoFar: progress.bytesSoFar, at: time)
        let due = lastProgressAt.map { time - $0 >= progressInterval } ?? true
        let done = progress.totalBytes.map { progress.bytesSoFar >= $0 } ?? false
        // A header value alone says nothing yet (no payload byte, no total).
        let informative = progress.bytesSoFar > 0 || progress.totalBytes != nil
        guard (due || done || first) && informative else { return nil }
        lastProgressAt = time
        return ProgressReport(progress: progress, bytesPerSecond: meter?.bytesPerSecond,
                              secondsRemaining: meter?.estimatedRemaining?.seconds)
    }

    private mutating func handlePlain(_ value: [UInt8], first: Bool, at time: Duration) -> Step {
        let event: MessageReceiver.Event
        do {
            event = try receiver.receive(value)
        } catch {
            return ending(.failed(TransferFailure(error)))
        }
        switch event {
        case .complete(let message):
            // A message that is whole is taken, however slowly it came.
            return ending(.complete(message, duration: time - (firstValueAt ?? time)))
        case .progress(let progress):
            if let shortfall = rateShortfall(at: time) { return ending(.failed(shortfall)) }
            let report = report(progress, first: first, at: time)
            return first ? .formatDetected(.compat, progress: report) : .proceed(progress: report)
        }
    }

    private mutating func ending(_ step: Step) -> Step {
        finished = true
        return step
    }

    package static func describe(_ duration: Duration) -> String {
        let value = duration.seconds
        return value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}

/// Why one visit to a peripheral did not yield a message, and what that means for the run.
package enum TransferFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Worth another try after a pause: connect aborted, services slow, peer gone, stalled, another central's answer.
    case transient(String)
    /// No transfer characteristic (or no way to subscribe): retry only after a long pause.
    case unsuitable(String)
    /// The message arrived but failed verification.
    case corrupt(ReceiveError)
    /// A bound of ours refused the transfer (`bound` names its option: "min-rate",
    /// "reserve", "quota-bytes", "quota-files"); the peer backs off like after a severe failure.
    case refused(bound: String, reason: String)

    package init(_ error: ReceiveError) {
        self = if case .missingEndOfMessage = error { .transient(error.description) } else { .corrupt(error) }
    }

    package var isRefusal: Bool {
        if case .refused = self { true } else { false }
    }

    package var description: String {
        switch self {
        case .transient(let reason), .unsuitable(let reason), .refused(_, let reason): reason
        case .corrupt(let error): error.description
        }
    }
}

package enum TransferInput: Sendable, Equatable {
    case value([UInt8])
    /// The subscription ended from the other side (socket closed, characteristic gone, peer gone); `reason` says which.
    case ended(String)
    /// A clock tick, so the idle timeout is checked even when nothing arrives.
    case tick
}
