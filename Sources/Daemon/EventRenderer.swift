#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Foundation
import Machines
import Roles
import Transfer
import SystemPackage

package enum EventOutputMode: Sendable, Equatable {
    /// One JSON object per line on standard output, for scripts.
    case jsonLines
    /// A progress line redrawn on standard error (a terminal), plus notable events.
    case terminal
    /// Every event as a plain line on standard error (`--verbose`, or not a terminal).
    case logLines
    /// Errors only.
    case quiet

    /// `--json` wins; else a terminal on stderr gets progress, `--verbose` lines, and a pipe or a service stays quiet.
    package static func choose(json: Bool, verbose: Bool, standardErrorIsTerminal: Bool = isatty(STDERR_FILENO) == 1) -> Self {
        if json { return .jsonLines }
        if verbose { return .logLines }
        return standardErrorIsTerminal ? .terminal : .quiet
    }
}

/// Turns role events into output. Confined to one task (the command's), so it keeps plain mutable state.
package struct EventRenderer {
    package let mode: EventOutputMode
    /// Shown at the head of the progress line: the file being sent, when there is one.
    package var label: String?
    private var progressLineShown = false
    private var lastProgressDraw: ContinuousClock.Instant?
    /// The peer of the current subscription, for the progress line.
    private var currentPeer: PeerDescription?
    /// When the current message's first bytes were seen.
    private var transferStarted: ContinuousClock.Instant?
    private var waitingHintShown = false
    /// The link under the current transfer ("2M · 15 ms · 251 B"), for the progress line.
    private var linkSummary: String?
    /// The last link reported, so that a repeated report (nothing changed) is not shown again.
    private var lastLink: LinkReport?
    /// On a terminal, a link is shown once it carries data: its parameters change a few times
    /// in the first tenths of a second (data length, PHY, interval), and one line is enough.
    private var pendingLink: LinkReport?

    package init(mode: EventOutputMode, label: String? = nil) {
        self.mode = mode
        self.label = label
    }

    package mutating func render(_ event: RoleEvent, extras: JSONEventExtras = JSONEventExtras()) {
        if case .link(let report) = event {
            if report == lastLink { return }
            lastLink = report
            linkSummary = report.summary.isEmpty ? nil : report.summary
        }
        switch mode {
        case .jsonLines: Self.writeLine(Self.jsonLine(for: event, extras: extras), to: STDOUT_FILENO)
        case .logLines: Self.writeLine("bletransfer: " + Self.sentence(for: event), to: STDERR_FILENO)
        case .terminal: renderOnTerminal(event)
        case .quiet:
            if case .warning(let text) = event { Self.writeLine("bletransfer: warning: \(SafeText.escape(text))", to: STDERR_FILENO) }
        }
    }

    /// Ends a pending progress line so that what follows starts on a fresh line.
    package mutating func finish() {
        if progressLineShown {
            Self.write("\n", to: STDERR_FILENO)
            progressLineShown = false
        }
    }

    private mutating func renderOnTerminal(_ event: RoleEvent) {
        if case .link(let report) = event, transferStarted == nil {
            pendingLink = report
            return
        }
        if case .progress = event, let link = pendingLink {
            pendingLink = nil
            finish()
            Self.writeLine(Self.sentence(for: .link(link)), to: STDERR_FILENO)
        }
        if case .progress(let peer, let progress, let rate, let remaining) = event {
            let now = ContinuousClock.now
            if transferStarted == nil || progress.bytesSoFar == 0 { transferStarted = now }
            let complete = progress.totalBytes.map { progress.bytesSoFar >= $0 } ?? false
            if let last = lastProgressDraw, now - last < .milliseconds(100), !complete { return }
            lastProgressDraw = now
            let line = Self.progressLine(progress, rate: rate, remaining: remaining,
                                         elapsed: transferStarted.map { (now - $0).seconds }, label: label,
                                         peer: (peer ?? currentPeer).map(Self.describe), link: linkSummary,
                                         width: Self.terminalWidth())
            Self.write("\r\u{1B}[K" + line, to: STDERR_FILENO)
            progressLineShown = true
            return
        }
        switch event {
        case .subscribed(let peer, _, _, _), .connected(let peer): currentPeer = peer
        case .delivered, .received, .transferAborted, .centralDropped, .refused, .disconnected: transferStarted = nil
        default: break
        }
        switch event {
        case .stateChanged, .advertising, .scanning, .connected, .subscribed, .delivered, .received,
             .transferAborted, .centralDropped, .retrying, .warning, .disconnected, .refused, .link:
            finish()
            Self.writeLine(Self.sentence(for: event), to: STDERR_FILENO)
            if !waitingHintShown, let hint = Self.waitingHint(for: event) {
                waitingHintShown = true
                Self.writeLine(hint, to: STDERR_FILENO)
            }
        case .peerFound, .connecting, .progress: break
        }
    }

    /// While a role waits for its peer: what to run on the other host.
    package static func waitingHint(for event: RoleEvent) -> String? {
        switch event {
        case .advertising: "waiting for a receiver; on the other host run: bletransfer receive"
        case .scanning: "waiting for a sender; on the other host run: bletransfer send \"TEXT\" (or --file PATH)"
        default: nil
        }
    }

    /// The terminal's width in columns: standard error's window size, else `COLUMNS`, else 80.
    package static func terminalWidth() -> Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        if let columns = ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init), columns > 0 { return columns }
        return 80
    }

    // MARK: Text

    /// The event in words, with every peer-controlled character escaped (``SafeText``): a
    /// device name or a reason quoting one cannot drive the terminal or forge a line.
    package static func sentence(for event: RoleEvent) -> String { SafeText.escape(rawSentence(for: event)) }

    private static func rawSentence(for event: RoleEvent) -> String {
        switch event {
        case .stateChanged(let from, let to, let detail):
            "state \(from.rawValue) → \(to.rawValue)" + (detail.map { ": \($0)" } ?? "")
        case .advertising(let adapter, let name): "advertising on \(adapter)" + (name.map { " as \"\($0)\"" } ?? "")
        case .scanning(let adapter): "scanning on \(adapter)"
        case .peerFound(let peer): "found \(describe(peer))"
        case .connecting(let peer, let attempt):
            "connecting to \(describe(peer))" + (attempt > 1 ? " (attempt \(attempt))" : "")
        case .connected(let peer): "connected to \(describe(peer))"
        case .subscribed(let peer, let mtu, let format, let transport):
            switch transport {
            case .gatt: "subscribed with \(describe(peer)), ATT MTU \(mtu), \(format.rawValue) format"
            case .l2cap: "subscribed with \(describe(peer)) over an L2CAP channel, MTU \(mtu), \(format.rawValue) format"
            }
        case .progress(_, let progress, let rate, let remaining):
            progressLine(progress, rate: rate, remaining: remaining)
        case .delivered(let message, let peer):
            "message \(message.sequence) delivered (\(formatBytes(message.byteCount)), \(message.format.rawValue))"
                + summary(bytes: message.byteCount, duration: message.duration)
                + (peer.map { " to \(describe($0))" } ?? "") + describeKey(message.peerKey)
        case .received(let message, let peer, let storedAt):
            "message \(message.sequence) received (\(formatBytes(message.byteCount)), \(message.format.rawValue))"
                + summary(bytes: message.byteCount, duration: message.duration)
                + (message.fileName.map { " named \"\($0)\"" } ?? "")
                + (peer.map { " from \(describe($0))" } ?? "") + describeKey(message.peerKey)
                + (storedAt.map { " → \($0)" } ?? "")
        case .transferAborted(let peer, let reason):
            "transfer" + (peer.map { " with \(describe($0))" } ?? "") + " aborted: \(reason); nothing kept"
        case .centralDropped(let peer, let reason): "dropped central \(describe(peer)): \(reason)"
        case .retrying(let reason, let delay): "\(reason); retrying in \(formatSeconds(delay.seconds))"
        case .disconnected(let peer): "disconnected from \(describe(peer))"
        case .refused(let peer, let bound, let reason, let delay):
            "refused \(describe(peer)) (\(bound)): \(reason); nothing kept, trying it again in \(formatSeconds(delay.seconds))"
        case .warning(let text): "warning: \(text)"
        case .link(let report): linkSentence(report)
        }
    }

    /// "link to AA:…: 2M · 15 ms · 251 B (tuned)", then what holds it back.
    static func linkSentence(_ report: LinkReport) -> String {
        var text = "link" + (report.peer.map { " to \($0)" } ?? "")
        let summary = report.summary
        text += ": " + (summary.isEmpty ? "parameters unknown" : summary)
        text += report.tuned ? " (tuned)" : " (not tuned)"
        if !report.limits.isEmpty {
            text += "; " + report.limits.map { "\($0.setting): \($0.detail)" }.joined(separator: "; ")
        }
        if let unreadable = report.unreadable, summary.isEmpty || report.intervalMilliseconds == nil {
            text += "; \(unreadable)"
        }
        return text
    }

    /// " (key SHA256:…, name)" for a peer whose key is listed; " (encrypted, not authenticated:
    /// key SHA256:…)" for one a keyless run let in; empty for Apple's flow.
    package static func describeKey(_ key: AuthenticatedPeer?) -> String {
        guard let key else { return "" }
        guard key.isListed else { return " (encrypted, not authenticated: key \(key.fingerprint))" }
        return " (key \(key.fingerprint)" + (key.name.map { " \($0)" } ?? "") + ")"
    }

    package static func describe(_ peer: PeerDescription) -> String {
        var text = peer.address
        if let name = peer.name, !name.isEmpty { text += " (\(name))" }
        return text
    }

    /// The progress line fitted to `width` columns: the parts that matter least (peer, bar, label, elapsed time, ETA,
    /// rate) go first when it does not fit; the rest is cut at `width`. `label` and `peer` are escaped (``SafeText``).
    package static func progressLine(_ progress: TransferProgress, rate: Double?, remaining: Double?,
                                    elapsed: Double? = nil, label: String? = nil, peer: String? = nil,
                                    link: String? = nil, width: Int = .max) -> String {
        // (priority, text) in display order; a higher priority stays longer.
        var parts: [(priority: Int, text: String)] = []
        if let label { parts.append((3, ellipsized(SafeText.escape(label), to: 32))) }
        if let peer { parts.append((1, "↔ " + ellipsized(SafeText.escape(peer), to: 40))) }
        if let total = progress.totalBytes, total > 0 {
            let fraction = min(1, Double(progress.bytesSoFar) / Double(total))
            let barWidth = 24
            let filled = Int((fraction * Double(barWidth)).rounded(.down))
            parts.append((2, "[" + String(repeating: "#", count: filled) + String(repeating: ".", count: barWidth - filled) + "]"))
            parts.append((9, String(format: "%3.0f%%", fraction * 100)))
            parts.append((8, "\(formatBytes(progress.bytesSoFar)) of \(formatBytes(total))"))
        } else { parts.append((9, formatBytes(progress.bytesSoFar))) }
        if let rate { parts.append((7, formatBytes(Int(rate)) + "/s")) }
        if let link { parts.append((6, "· " + link)) }
        if let elapsed { parts.append((4, formatSeconds(elapsed) + " elapsed")) }
        if let remaining { parts.append((5, "ETA " + formatSeconds(remaining))) }
        func joined() -> String { parts.map(\.text).joined(separator: " ") }
        while joined().count > width, parts.count > 1,
              let lowest = parts.indices.min(by: { parts[$0].priority < parts[$1].priority }) {
            parts.remove(at: lowest)
        }
        let line = joined()
        return line.count > width ? String(line.prefix(max(0, width))) : line
    }

    /// `text` cut to `limit` characters, its end replaced by "…" when cut.
    static func ellipsized(_ text: String, to limit: Int) -> String {
        text.count <= limit ? text : String(text.prefix(limit - 1)) + "…"
    }

    /// The closing words of a message: " in 3.2s, 3.1 KiB/s on average".
    package static func summary(bytes: Int, duration: Duration?) -> String {
        guard let duration else { return "" }
        let seconds = duration.seconds
        guard seconds > 0 else { return "" }
        return " in \(formatSeconds(seconds)), \(formatBytes(Int(Double(bytes) / seconds)))/s on average"
    }

    package static func formatBytes(_ count: Int) -> String {
        if count < 1024 { return "\(count) B" }
        if count < 1024 * 1024 { return String(format: "%.1f KiB", Double(count) / 1024) }
        return String(format: "%.1f MiB", Double(count) / (1024 * 1024))
    }

    package static func formatSeconds(_ seconds: Double) -> String {
        if seconds < 10 { return String(format: "%.1fs", seconds) }
        if seconds < 3600 { return "\(Int(seconds) / 60)m\(String(format: "%02d", Int(seconds) % 60))s" }
        return "\(Int(seconds) / 3600)h\(String(format: "%02d", Int(seconds) % 3600 / 60))m"
    }

    /// Seconds to the millisecond, three decimals always (`1.500`). Written out instead of `String(format: "%.3f")`:
    /// Foundation's formatter took longer than the rest of a message's log line (`bletransfer-bench events`).
    package static func millisecondSeconds(_ duration: Duration) -> String {
        let milliseconds = max(0, Int((duration.seconds * 1000).rounded()))
        let fraction = String(milliseconds % 1000)
        return "\(milliseconds / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }

    // MARK: JSON

    /// JSON encoders escape C0 controls but write C1 controls and bidi overrides as they are, which a terminal would
    /// act on. They occur only inside strings, where `\uNNNN` is the same character: the JSON value is unchanged.
    package static func jsonEscapingTerminalControls(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: { SafeText.needsEscape($0) }) else { return json }
        var result = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if SafeText.needsEscape(scalar) {
                let hex = String(scalar.value, radix: 16)
                result.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            } else { result.append(scalar) }
        }
        return String(result)
    }

    // MARK: Raw output

    package static func writeLine(_ line: String, to fd: Int32) { write(line + "\n", to: fd) }

    package static func write(_ text: String, to fd: Int32) {
        // A closed stderr/stdout must not take the role down: its error is dropped.
        _ = try? FileDescriptor(rawValue: fd).writeAll(Array(text.utf8))
    }
}
