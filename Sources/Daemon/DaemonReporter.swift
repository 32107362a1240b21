#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Logging
import Machines
import Roles
import Transfer

/// Everything the daemon reports: the role's events, the outbox's, and the supervisor's own.
enum DaemonReport: Sendable {
    case role(RoleEvent)
    case outbox(OutboxSourceEvent)
    /// The role could not run or stopped on a failure; the supervisor tries again in `retryIn`.
    /// `hint`: what fixes it, as `bletransfer status` says (Bluetooth unusable).
    case waiting(kind: FailureKind, message: String, hint: String? = nil, retryIn: Duration)
    /// A SIGTERM or SIGINT arrived: everything is being unregistered.
    case stopping(signal: Int32)
}

/// Turns `DaemonReport`s into log lines (swift-log, journald-friendly via `DaemonLogHandler`), `STATUS=` updates and,
/// with `--json`, JSON lines on stdout. Confined to the task draining reports: plain mutable state.
struct DaemonReporter {
    private(set) var status: DaemonStatus
    private let logger: Logger
    private let notifier: SystemdNotifier
    private let json: Bool
    /// The last waiting message logged: a failure every retry repeats is an error once, then debug until it changes.
    private var lastWaitingMessage: String?
    private var lastNotifiedStatus: String?

    init(status: DaemonStatus, logger: Logger, notifier: SystemdNotifier, json: Bool) {
        self.status = status
        self.logger = logger
        self.notifier = notifier
        self.json = json
    }

    mutating func handle(_ report: DaemonReport) {
        switch report {
        case .role(let event): handle(event)
        case .outbox(let event): handle(event)
        case .waiting(let kind, let message, let hint, let retryIn):
            handleWaiting(kind: kind, message: message, hint: hint, retryIn: retryIn)
        case .stopping(let signal):
            let name = StoppedJSONEvent.signalName(signal)
            logger.notice("stopping", metadata: ["signal": "\(name)", "messages": "\(status.messages)"])
            do {
                try notifier.stopping(status: "stopping after \(name); " + status.line)
            } catch { logger.debug("systemd notification failed", metadata: ["error": "\(error)"]) }
            return
        }
        publishStatus()
    }

    // MARK: Role events

    private mutating func handle(_ event: RoleEvent) {
        var extras = JSONEventExtras()
        switch event {
        case .stateChanged(let from, let to, let detail):
            status.state = to
            if to == .poweredOn { status.waitingReason = nil; lastWaitingMessage = nil }
            var metadata: Logger.Metadata = ["from": "\(from.rawValue)", "state": "\(to.rawValue)"]
            if let detail { metadata["detail"] = "\(detail)" }
            switch to {
            case .unauthorized:
                metadata["advice"] = "\(Self.permissionAdvice)"
                logger.error("Bluetooth access denied", metadata: metadata)
            case .unsupported: logger.warning("Bluetooth unusable; waiting", metadata: metadata)
            case .poweredOn: logger.notice("Bluetooth on", metadata: metadata)
            case .poweredOff, .resetting, .unknown: logger.notice("Bluetooth not ready; waiting", metadata: metadata)
            }
        case .advertising(let adapter, let name):
            var metadata: Logger.Metadata = ["adapter": "\(adapter)"]
            if let name { metadata["name"] = "\(name)" }
            logger.info("advertising", metadata: metadata)
        case .scanning(let adapter): logger.info("scanning", metadata: ["adapter": "\(adapter)"])
        case .peerFound(let peer): logger.debug("found", metadata: Self.metadata(peer))
        case .connecting(let peer, let attempt):
            logger.debug("connecting", metadata: Self.metadata(peer, ["attempt": "\(attempt)"]))
        case .connected(let peer): logger.debug("connected", metadata: Self.metadata(peer))
        case .subscribed(let peer, let mtu, let format, let transport):
            logger.info("subscribed", metadata: Self.metadata(peer, [
                "mtu": "\(mtu)", "format": "\(format.rawValue)", "transport": "\(transport.rawValue)",
            ]))
        case .progress(let peer, let progress, _, _):
            var metadata = peer.map(Self.metadata) ?? [:]
            metadata["bytes"] = "\(progress.bytesSoFar)"
            if let total = progress.totalBytes { metadata["total"] = "\(total)" }
            logger.trace("progress", metadata: metadata)
        case .delivered(let summary, let peer):
            logger.info("message delivered", metadata: countMessage(summary, peer: peer, extras: &extras))
        case .received(let summary, let peer, let storedAt):
            var metadata = countMessage(summary, peer: peer, extras: &extras)
            if let storedAt { metadata["path"] = "\(storedAt)" }
            logger.info("message received", metadata: metadata)
        case .transferAborted(let peer, let reason):
            var metadata = peer.map(Self.metadata) ?? [:]
            metadata["reason"] = "\(reason)"
            logger.warning("transfer aborted, nothing kept", metadata: metadata)
        case .centralDropped(let peer, let reason):
            logger.warning("central dropped", metadata: Self.metadata(peer, ["reason": "\(reason)"]))
        case .retrying(let reason, let delay):
            logger.notice("retrying", metadata: ["reason": "\(reason)", "delay": "\(EventRenderer.formatSeconds(delay.seconds))"])
        case .disconnected(let peer): logger.debug("disconnected", metadata: Self.metadata(peer))
        case .refused(let peer, let bound, let reason, let delay):
            logger.warning("peer refused, nothing kept", metadata: Self.metadata(peer, [
                "bound": "\(bound)", "reason": "\(reason)", "retry": "\(EventRenderer.formatSeconds(delay.seconds))",
            ]))
        case .warning(let text): logger.warning("\(text)")
        case .link(let report):
            // Once per change of a link's parameters (the watch reports changes only).
            var metadata: Logger.Metadata = ["tuned": "\(report.tuned)"]
            if let peer = report.peer { metadata["peer"] = "\(peer)" }
            if !report.summary.isEmpty { metadata["link"] = "\(report.summary)" }
            if !report.limits.isEmpty {
                metadata["limits"] = "\(report.limits.map { "\($0.setting) (\($0.by))" }.joined(separator: ", "))"
            }
            logger.info("link", metadata: metadata)
        }
        if json { EventRenderer.writeLine(EventRenderer.jsonLine(for: event, extras: extras), to: STDOUT_FILENO) }
    }

    /// Counts a message delivered or received (and the memory the daemon holds after it), for
    /// the status and the JSON line; returns what both log lines say of it.
    private mutating func countMessage(_ summary: MessageSummary, peer: PeerDescription?,
                                       extras: inout JSONEventExtras) -> Logger.Metadata {
        status.messages += 1
        status.residentBytes = ProcessMemory.residentBytes()
        var metadata = Self.metadata(summary)
        if let peer { metadata.merge(Self.metadata(peer)) { _, new in new } }
        metadata["count"] = "\(status.messages)"
        if let rss = status.residentBytes { metadata["rss"] = "\(rss)" }
        extras.count = status.messages
        extras.rss = status.residentBytes
        return metadata
    }

    // MARK: Outbox events

    private mutating func handle(_ event: OutboxSourceEvent) {
        // The JSON event's name and fields; rendered only with --json.
        let jsonEvent: (name: String, fields: any Encodable)
        switch event {
        case .serving(let file):
            status.servingFile = file.name
            logger.info("offering outbox file", metadata: ["file": "\(file.name)", "bytes": "\(file.size)"])
            jsonEvent = ("offering", OfferingJSONEvent(file: file.name, bytes: file.size))
        case .moved(let file, let destination):
            status.servingFile = nil
            if let destination {
                logger.info("outbox file sent", metadata: ["file": "\(file.name)", "path": "\(destination)"])
                jsonEvent = ("sent", SentJSONEvent(file: file.name, path: destination.string))
            } else {
                logger.warning("a delivered outbox file was no longer in the outbox; nothing moved",
                               metadata: ["file": "\(file.name)"])
                jsonEvent = ("sent", SentJSONEvent(file: file.name))
            }
        case .moveFailed(let file, let error):
            status.servingFile = nil
            logger.error("delivered, but moving it to sent/ failed; it will be sent again",
                         metadata: ["file": "\(file.name)", "error": "\(error)"])
            jsonEvent = ("error", ErrorJSONEvent("\(error)", file: file.name))
        case .unreadable(let error, let retryIn):
            logger.error("cannot read the outbox", metadata: [
                "error": "\(error)", "retry": "\(EventRenderer.formatSeconds(retryIn.seconds))",
            ])
            jsonEvent = ("error", ErrorJSONEvent("\(error)"))
        case .notice(let notice):
            switch notice {
            case .quarantined(let name, let reason, let movedTo):
                logger.warning("outbox file cannot be sent; moved to failed/", metadata: [
                    "file": "\(name)", "reason": "\(reason)", "path": "\(movedTo)",
                ])
                jsonEvent = ("failed", FailedJSONEvent(file: name, reason: reason, path: movedTo.string))
            case .skipped(let name, let reason):
                logger.error("outbox file cannot be sent and stays in the outbox", metadata: [
                    "file": "\(name)", "reason": "\(reason)",
                ])
                jsonEvent = ("failed", FailedJSONEvent(file: name, reason: reason))
            }
        }
        if json { EventRenderer.writeLine(JSONEvents.line(jsonEvent.name, jsonEvent.fields), to: STDOUT_FILENO) }
    }

    // MARK: Waiting

    private mutating func handleWaiting(kind: FailureKind, message: String, hint: String?, retryIn: Duration) {
        if kind == .permissionDenied { status.state = .unauthorized }
        status.waitingReason = message
        let delay = EventRenderer.formatSeconds(retryIn.seconds)
        var metadata: Logger.Metadata = ["kind": "\(kind.rawValue)", "retry": "\(delay)"]
        if kind == .permissionDenied { metadata["advice"] = "\(Self.permissionAdvice)" }
        if let hint { metadata["hint"] = "\(hint)" }
        if message != lastWaitingMessage {
            lastWaitingMessage = message
            logger.error("\(message)", metadata: metadata)
        } else { logger.debug("\(message)", metadata: metadata) }
        if json {
            let waiting = WaitingJSONEvent(kind: kind.rawValue, text: message, retrySeconds: retryIn.seconds,
                                           advice: kind == .permissionDenied ? Self.permissionAdvice : nil, hint: hint)
            EventRenderer.writeLine(JSONEvents.line("waiting", waiting), to: STDOUT_FILENO)
        }
    }

    // MARK: systemd

    /// Sends the status line when it changed.
    mutating func publishStatus() {
        let line = status.line
        guard line != lastNotifiedStatus else { return }
        lastNotifiedStatus = line
        do {
            try notifier.status(line)
        } catch { logger.debug("systemd notification failed", metadata: ["error": "\(error)"]) }
    }

    // MARK: Helpers

    static var permissionAdvice: String { PermissionAdvice.unauthorized(user: currentUserName) }

    static var currentUserName: String? {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    static func metadata(_ peer: PeerDescription) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["peer": "\(peer.address)"]
        if let name = peer.name, !name.isEmpty { metadata["peerName"] = "\(name)" }
        return metadata
    }

    /// The peer's fields, then `fields`.
    static func metadata(_ peer: PeerDescription, _ fields: Logger.Metadata) -> Logger.Metadata {
        metadata(peer).merging(fields) { _, field in field }
    }

    static func metadata(_ summary: MessageSummary) -> Logger.Metadata {
        var metadata: Logger.Metadata = ["bytes": "\(summary.byteCount)", "format": "\(summary.format.rawValue)"]
        if let digest = summary.sha256 { metadata["sha256"] = "\(digest)" }
        // The sender's word: escaped so that it cannot forge or break a log line.
        if let name = summary.fileName { metadata["name"] = "\(SafeText.escape(name))" }
        if let offset = summary.resumedFrom { metadata["resumed_from"] = "\(offset)" }
        if let onAir = summary.payloadBytesOnAir { metadata["payload_bytes_on_air"] = "\(onAir)" }
        if let duration = summary.duration { metadata["seconds"] = "\(EventRenderer.millisecondSeconds(duration))" }
        if let ordering = summary.ordering {
            metadata["order_at_risk"] = "true"
            metadata["order_risk"] = "\(ordering.reason)"
        }
        if let key = summary.peerKey {
            // The sender of a received message, the receiver of a delivered one.
            metadata["peer_key"] = "\(key.fingerprint)"
            if let name = key.name { metadata["peer_key_name"] = "\(name)" }
        }
        return metadata
    }
}
