import ArgumentParser
import Daemon
import Foundation
import Machines
import Transfer

/// What reporting a message costs beyond moving it: the hex of its SHA-256 (events, receipts),
/// the seconds in its log line, and the `delivered` line a daemon with `--json` prints. The
/// first two are measured against the way they were written before (`String(format:)`, on the
/// same input, after checking both give the same text); the JSON line, written with
/// Foundation's `JSONEncoder`, is printed for scale. On a host whose CPU the link already keeps
/// busy, each microsecond here is link time lost per message.
struct EventsBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "Per-message reporting (SHA-256 hex, log seconds, the JSON line): per second, against String(format:)."
    )

    @Option(help: "Renderings per measurement.")
    var count: Int = 20_000

    @Option(help: "Measurements of each; the best is printed.")
    var repetitions: Int = 5

    mutating func run() throws {
        guard count > 0, repetitions > 0 else { throw ValidationError("--count and --repetitions must be positive") }
        let digest = seededPayload(size: 32)
        let duration = Duration.milliseconds(1234)
        guard lowercaseHex(digest) == digest.map({ String(format: "%02x", $0) }).joined(),
              EventRenderer.millisecondSeconds(duration) == String(format: "%.3f", duration.seconds)
        else {
            throw ValidationError("the renderings differ from String(format:)'s")
        }
        let summary = MessageSummary(sequence: 42, byteCount: 4096, format: .secure, sha256: lowercaseHex(digest),
                                     duration: duration,
                                     peerKey: AuthenticatedPeer(keyLine: "bletransfer-x25519 AAAA host-b",
                                                                fingerprint: "SHA256:q2v3/Abc+def", name: "host-b"),
                                     fileName: "report-42.txt", payloadBytesOnAir: 4096)
        let event = RoleEvent.delivered(summary, to: PeerDescription(address: "AA:BB:CC:DD:EE:FF", name: "lab-b", rssi: -60))
        let extras = JSONEventExtras(count: 42, rss: 29_000_000)

        let count = count, repetitions = repetitions
        func timed(_ body: () -> Void) -> Double { bestSeconds(of: repetitions, body) }
        let hexBefore = timed { for _ in 0..<count { _ = digest.map { String(format: "%02x", $0) }.joined() } }
        let secondsBefore = timed { for _ in 0..<count { _ = String(format: "%.3f", duration.seconds) } }
        // Each row against the way it was written before (its `before`); the JSON line for scale.
        let rows: [(name: String, seconds: Double, before: Double?)] = [
            ("SHA-256 hex, String(format:) a byte", hexBefore, hexBefore),
            ("SHA-256 hex, lowercaseHex", timed { for _ in 0..<count { _ = lowercaseHex(digest) } }, hexBefore),
            ("log seconds, String(format: \"%.3f\")", secondsBefore, secondsBefore),
            ("log seconds, millisecondSeconds",
             timed { for _ in 0..<count { _ = EventRenderer.millisecondSeconds(duration) } }, secondsBefore),
            ("delivered JSON line (JSONEncoder)",
             timed { for _ in 0..<count { _ = EventRenderer.jsonLine(for: event, extras: extras) } }, nil),
        ]
        print("Events benchmark: \(count) renderings a measurement, best of \(repetitions)")
        print(pad("measurement", 40) + pad("per second", 14, right: true) + pad("µs each", 10, right: true)
              + pad("× before", 10, right: true))
        for row in rows {
            print(pad(row.name, 40) + pad(format(Double(count) / row.seconds, digits: 0), 14, right: true)
                  + pad(format(row.seconds / Double(count) * 1e6, digits: 2), 10, right: true)
                  + (row.before.map { pad(format($0 / row.seconds, digits: 1), 10, right: true) } ?? ""))
        }
    }
}
