#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Foundation
import Roles
import Transfer
import SystemPackage

/// How a command shows what its role is doing.
public enum EventOutputMode: Sendable, Equatable {
    /// One JSON object per line on standard output, for scripts.
    case jsonLines
    /// A progress line redrawn on standard error (a terminal), plus notable events.
    case terminal
    /// Every event as a plain line on standard error (`--verbose`, or not a terminal).
    case logLines
    /// Errors only.
    case quiet

    /// `--json` wins; otherwise a terminal on stderr gets progress, `--verbose` gets lines,
    /// and anything else stays quiet, as befits a pipe or a service.
    public static func choose(json: Bool, verbose: Bool, standardErrorIsTerminal: Bool = isatty(STDERR_FILENO) == 1) -> Self {
        if json { return .jsonLines }
        if verbose { return .logLines }
        return standardErrorIsTerminal ? .terminal : .quiet
    }
}

/// Turns role events into output. Confined to one task (the command's), so it keeps plain
/// mutable state.
public struct EventRenderer {
    public let mode: EventOutputMode
    private var progressLineShown = false
    private var lastProgressDraw: ContinuousClock.Instant?

    public init(mode: EventOutputMode) {
        self.mode = mode
    }

    public mutating func render(_ event: RoleEvent, extras: JSONEventExtras = JSONEventExtras()) {
        switch mode {
        case .jsonLines:
            Self.writeLine(Self.jsonLine(for: event, extras: extras), to: STDOUT_FILENO)
        case .logLines:
            Self.writeLine("bletransfer: " + Self.sentence(for: event), to: STDERR_FILENO)
        case .terminal:
            renderOnTerminal(event)
        case .quiet:
            if case .warning(let text) = event { Self.writeLine("bletransfer: warning: \(SafeText.escape(text))", to: STDERR_FILENO) }
        }
    }

    /// Ends a pending progress line so that what follows starts on a fresh line.
    public mutating func finish() {
        if progressLineShown {
            Self.write("\n", to: STDERR_FILENO)
            progressLineShown = false
        }
    }

    private mutating func renderOnTerminal(_ event: RoleEvent) {
        if case .progress(_, let progress, let rate, let remaining) = event {
            let now = ContinuousClock.now
            let complete = progress.totalBytes.map { progress.bytesSoFar >= $0 } ?? false
            if let last = lastProgressDraw, now - last < .milliseconds(100), !complete { return }
            lastProgressDraw = now
            Self.write("\r\u{1B}[K" + SafeText.escape(Self.progressLine(progress, rate: rate, remaining: remaining)),
                       to: STDERR_FILENO)
            progressLineShown = true
            return
        }
        switch event {
        case .stateChanged, .advertising, .scanning, .connected, .subscribed, .delivered, .received,
             .transferAborted, .centralDropped, .retrying, .warning, .disconnected, .refused:
            finish()
            Self.writeLine(Self.sentence(for: event), to: STDERR_FILENO)
        case .peerFound, .connecting, .progress:
            break
        }
    }

    // MARK: Text

    /// The event in words, with every peer-controlled character escaped (``SafeText``): a
    /// device name or a reason quoting one cannot drive the terminal or forge a line.
    public static func sentence(for event: RoleEvent) -> String {
        SafeText.escape(rawSentence(for: event))
    }

    private static func rawSentence(for event: RoleEvent) -> String {
        switch event {
        case .stateChanged(let from, let to, let detail):
            "state \(from.rawValue) → \(to.rawValue)" + (detail.map { ": \($0)" } ?? "")
        case .advertising(let adapter, let name):
            "advertising on \(adapter)" + (name.map { " as \"\($0)\"" } ?? "")
        case .scanning(let adapter):
            "scanning on \(adapter)"
        case .peerFound(let peer):
            "found \(describe(peer))"
        case .connecting(let peer, let attempt):
            "connecting to \(describe(peer))" + (attempt > 1 ? " (attempt \(attempt))" : "")
        case .connected(let peer):
            "connected to \(describe(peer))"
        case .subscribed(let peer, let mtu, let format, let transport):
            switch transport {
            case .gatt: "subscribed with \(describe(peer)), ATT MTU \(mtu), \(format.rawValue) format"
            case .l2cap: "subscribed with \(describe(peer)) over an L2CAP channel, MTU \(mtu), \(format.rawValue) format"
            }
        case .progress(_, let progress, let rate, let remaining):
            progressLine(progress, rate: rate, remaining: remaining)
        case .delivered(let message, let peer):
            "message \(message.sequence) delivered (\(formatBytes(message.byteCount)), \(message.format.rawValue))"
                + (peer.map { " to \(describe($0))" } ?? "") + describeKey(message.peerKey)
        case .received(let message, let peer, let storedAt):
            "message \(message.sequence) received (\(formatBytes(message.byteCount)), \(message.format.rawValue))"
                + (message.fileName.map { " named \"\($0)\"" } ?? "")
                + (peer.map { " from \(describe($0))" } ?? "") + describeKey(message.peerKey)
                + (storedAt.map { " → \($0)" } ?? "")
        case .transferAborted(let peer, let reason):
            "transfer" + (peer.map { " with \(describe($0))" } ?? "") + " aborted: \(reason); nothing kept"
        case .centralDropped(let peer, let reason):
            "dropped central \(describe(peer)): \(reason)"
        case .retrying(let reason, let delay):
            "\(reason); retrying in \(formatSeconds(delay.seconds))"
        case .disconnected(let peer):
            "disconnected from \(describe(peer))"
        case .refused(let peer, let bound, let reason, let delay):
            "refused \(describe(peer)) (\(bound)): \(reason); nothing kept, trying it again in \(formatSeconds(delay.seconds))"
        case .warning(let text):
            "warning: \(text)"
        }
    }

    /// " (key SHA256:…, name)" for a peer whose key is listed; " (encrypted, not authenticated:
    /// key SHA256:…)" for one a keyless run let in; empty for Apple's flow.
    public static func describeKey(_ key: AuthenticatedPeer?) -> String {
        guard let key else { return "" }
        guard key.isListed else { return " (encrypted, not authenticated: key \(key.fingerprint))" }
        return " (key \(key.fingerprint)" + (key.name.map { " \($0)" } ?? "") + ")"
    }

    public static func describe(_ peer: PeerDescription) -> String {
        var text = peer.address
        if let name = peer.name, !name.isEmpty { text += " (\(name))" }
        return text
    }

    public static func progressLine(_ progress: TransferProgress, rate: Double?, remaining: Double?) -> String {
        var parts: [String] = []
        if let total = progress.totalBytes, total > 0 {
            let fraction = min(1, Double(progress.bytesSoFar) / Double(total))
            let width = 24
            let filled = Int((fraction * Double(width)).rounded(.down))
            parts.append("[" + String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled) + "]")
            parts.append(String(format: "%3.0f%%", fraction * 100))
            parts.append("\(formatBytes(progress.bytesSoFar)) of \(formatBytes(total))")
        } else {
            parts.append(formatBytes(progress.bytesSoFar))
        }
        if let rate { parts.append(formatBytes(Int(rate)) + "/s") }
        if let remaining { parts.append("ETA " + formatSeconds(remaining)) }
        return parts.joined(separator: " ")
    }

    public static func formatBytes(_ count: Int) -> String {
        if count < 1024 { return "\(count) B" }
        if count < 1024 * 1024 { return String(format: "%.1f KiB", Double(count) / 1024) }
        return String(format: "%.1f MiB", Double(count) / (1024 * 1024))
    }

    public static func formatSeconds(_ seconds: Double) -> String {
        if seconds < 10 { return String(format: "%.1fs", seconds) }
        if seconds < 3600 { return "\(Int(seconds) / 60)m\(String(format: "%02d", Int(seconds) % 60))s" }
        return "\(Int(seconds) / 3600)h\(String(format: "%02d", Int(seconds) % 3600 / 60))m"
    }

    // MARK: JSON

    /// JSON encoders escape C0 controls but write C1 controls and bidi overrides as they
    /// are; a terminal showing the line would act on them. They can only occur inside
    /// strings, where `\uNNNN` means the same character, so the JSON value is unchanged.
    public static func jsonEscapingTerminalControls(_ json: String) -> String {
        guard json.unicodeScalars.contains(where: { SafeText.needsEscape($0) }) else { return json }
        var result = String.UnicodeScalarView()
        for scalar in json.unicodeScalars {
            if SafeText.needsEscape(scalar) {
                let hex = String(scalar.value, radix: 16)
                result.append(contentsOf: ("\\u" + String(repeating: "0", count: 4 - hex.count) + hex).unicodeScalars)
            } else {
                result.append(scalar)
            }
        }
        return String(result)
    }

    // MARK: Raw output

    public static func writeLine(_ line: String, to fd: Int32) {
        write(line + "\n", to: fd)
    }

    public static func write(_ text: String, to fd: Int32) {
        // A closed stderr/stdout must not take the role down: its error is dropped.
        _ = try? FileDescriptor(rawValue: fd).writeAll(Array(text.utf8))
    }
}
