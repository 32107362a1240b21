import Transfer

/// The receiving half of one subscription, without I/O: notification values, ends and clock
/// ticks go in (with the time since the subscription started), and out comes what the central
/// does next. Wraps the core's ``MessageReceiver`` with what a live link adds: an idle
/// timeout, progress throttling, rate and ETA.
struct MessageAssembly: Sendable {
    enum Step: Sendable, Equatable {
        /// Keep listening; report this progress when non-nil.
        case proceed(progress: ProgressReport?)
        /// The first value arrived and tells the format.
        case formatDetected(TransferFormat, progress: ProgressReport?)
        /// `EOM` arrived and the message verified.
        case complete(ReceivedMessage, duration: Duration)
        /// The transfer cannot end well; nothing of it may be kept.
        case failed(TransferFailure)
    }

    struct ProgressReport: Sendable, Equatable {
        var progress: TransferProgress
        var bytesPerSecond: Double?
        var secondsRemaining: Double?
    }

    let idleTimeout: Duration
    /// The slowest transfer kept going, in payload bytes per second since subscribing, after
    /// `rateGrace`; 0: no floor. Unlike the idle timer, which every value resets, this bound
    /// counts from the subscription, so a peer trickling a byte now and then cannot hold the
    /// central for longer than `rateGrace + size / minimumRate`.
    let minimumRate: Int
    let rateGrace: Duration
    /// How long an `EOM` that arrived before anything told the format (a HELLO was written)
    /// waits for a framed sender's first value; then the message is read as compat (a peer
    /// that ignored the HELLO and sent an empty message). Reordering delays values by
    /// milliseconds, so this is generous.
    let undecidedSettle: Duration
    /// Progress is reported at most this often (and always for the last value before `EOM`).
    let progressInterval: Duration
    private var receiver: MessageReceiver
    private var meter: ProgressMeter?
    private var lastActivity: Duration = .zero
    private var firstValueAt: Duration?
    private var undecidedEndOfMessageAt: Duration?
    private var lastProgressAt: Duration?
    private(set) var finished = false

    init(limits: TransferLimits, sentHello: Hello?, idleTimeout: Duration, minimumRate: Int = 0,
         rateGrace: Duration = .seconds(20), progressInterval: Duration = .milliseconds(200),
         undecidedSettle: Duration = .milliseconds(1500)) {
        receiver = MessageReceiver(limits: limits, sentHello: sentHello)
        self.idleTimeout = idleTimeout
        self.minimumRate = max(0, minimumRate)
        self.rateGrace = rateGrace
        self.undecidedSettle = undecidedSettle
        self.progressInterval = progressInterval
    }

    var valuesReceived: Int { receiver.valuesReceived }
    var bytesReceived: Int { receiver.progress.bytesSoFar }
    /// The payload length a framed header announced; nil before it (or for compat).
    var announcedLength: Int? { receiver.progress.totalBytes }

    /// The failure when the transfer fell below `minimumRate` at `time`; nil while it keeps up.
    func rateShortfall(at time: Duration) -> TransferFailure? {
        guard minimumRate > 0, time > rateGrace else { return nil }
        let owed = Double(minimumRate) * (time - rateGrace).seconds
        guard Double(receiver.progress.bytesSoFar) < owed else { return nil }
        return .refused(
            bound: "min-rate",
            reason: "too slow: \(receiver.progress.bytesSoFar) bytes in \((time.seconds * 10).rounded() / 10) s, "
                + "below \(minimumRate) bytes/s after \(Self.describe(rateGrace)) (--min-rate)")
    }

    mutating func handle(_ input: TransferInput, at time: Duration) -> Step {
        guard !finished else { return .proceed(progress: nil) }
        switch input {
        case .tick:
            if let endedAt = undecidedEndOfMessageAt, receiver.isUndecidedAfterEndOfMessage,
               time - endedAt >= undecidedSettle {
                finished = true
                do {
                    if case .complete(let message) = try receiver.settleAsCompat() {
                        return .complete(message, duration: time - (firstValueAt ?? time))
                    }
                } catch {
                    return .failed(TransferFailure(error))
                }
                return .failed(.transient("the message ended before its format was known"))
            }
            if let shortfall = rateShortfall(at: time) {
                finished = true
                return .failed(shortfall)
            }
            if time - lastActivity >= idleTimeout {
                finished = true
                let detail = receiver.valuesReceived == 0
                    ? "no notification within \(Self.describe(idleTimeout)) of subscribing"
                    : "no notification for \(Self.describe(idleTimeout)) (\(receiver.progress.bytesSoFar) bytes received, no end marker)"
                return .failed(.transient("the peripheral stalled: \(detail)"))
            }
            return .proceed(progress: nil)

        case .ended(let reason):
            finished = true
            let error = receiver.finishWithoutEOM()
            return .failed(.transient(error.map { "\($0) (\(reason))" } ?? reason))

        case .value(let value):
            lastActivity = time
            let first = firstValueAt == nil
            if first { firstValueAt = time }
            let event: MessageReceiver.Event
            do {
                event = try receiver.receive(value)
            } catch {
                finished = true
                return .failed(TransferFailure(error))
            }
            if receiver.isUndecidedAfterEndOfMessage, undecidedEndOfMessageAt == nil {
                undecidedEndOfMessageAt = time
            }
            if case .complete = event {
                // A message that is whole is taken, however slowly it came.
            } else if let shortfall = rateShortfall(at: time) {
                finished = true
                return .failed(shortfall)
            }
            switch event {
            case .complete(let message):
                finished = true
                return .complete(message, duration: time - (firstValueAt ?? time))
            case .progress(let progress):
                if meter == nil || meter?.totalBytes != progress.totalBytes {
                    meter = ProgressMeter(totalBytes: progress.totalBytes)
                }
                meter?.record(bytesSoFar: progress.bytesSoFar, at: time)
                var report: ProgressReport?
                let due = lastProgressAt.map { time - $0 >= progressInterval } ?? true
                let done = progress.totalBytes.map { progress.bytesSoFar >= $0 } ?? false
                // A header value alone says nothing yet (no payload byte, no total).
                let informative = progress.bytesSoFar > 0 || progress.totalBytes != nil
                if (due || done || first) && informative {
                    lastProgressAt = time
                    report = ProgressReport(
                        progress: progress, bytesPerSecond: meter?.bytesPerSecond,
                        secondsRemaining: meter?.estimatedRemaining?.seconds)
                }
                if first, let format = receiver.detectedFormat {
                    return .formatDetected(format == .framed ? .framed : .compat, progress: report)
                }
                return .proceed(progress: report)
            }
        }
    }

    static func describe(_ duration: Duration) -> String {
        let value = duration.seconds
        return value == value.rounded() ? "\(Int(value)) s" : "\(value) s"
    }
}

/// Why one visit to a peripheral did not yield a message, and what that means for the run.
enum TransferFailure: Error, Sendable, Equatable, CustomStringConvertible {
    /// Worth another try after a pause: connect aborted, services slow, peer gone mid-transfer,
    /// stalled, an answer to another central's request.
    case transient(String)
    /// The peer does not offer the transfer characteristic (or no way to subscribe): try it
    /// again only after a long pause.
    case unsuitable(String)
    /// The message arrived but failed verification.
    case corrupt(ReceiveError)
    /// A bound of ours refused the transfer (`bound` names its option: "min-rate",
    /// "reserve", "quota-bytes", "quota-files"); the peer backs off like after a severe failure.
    case refused(bound: String, reason: String)

    init(_ error: ReceiveError) {
        switch error {
        case .sessionMismatch:
            // BlueZ 5.66 sends notifications to every subscriber: another central's framed
            // answer is nobody's fault; try again.
            self = .transient(error.description)
        case .missingEndOfMessage:
            self = .transient(error.description)
        default:
            self = .corrupt(error)
        }
    }

    var isRefusal: Bool {
        if case .refused = self { true } else { false }
    }

    var description: String {
        switch self {
        case .transient(let reason), .unsuitable(let reason): reason
        case .corrupt(let error): error.description
        case .refused(_, let reason): reason
        }
    }
}
