@testable import Daemon
import DaemonSupport
import Foundation
@testable import Machines
import Roles
@testable import Storage
import Testing
import Transfer

/// What the CLI and the daemon print for role events.
@Suite struct EventRendererTests {
    @Test(arguments: [0.0, 1_795_578_725.715_899, 951_782_400.999, 4_102_444_799.5])
    func eventTimesAreISO8601WithMilliseconds(seconds: Double) {
        // ISO 8601 in UTC with milliseconds; to the second, what ISO8601DateFormatter writes.
        let date = Date(timeIntervalSince1970: seconds)
        let text = EventTimestamp.string(for: date)
        #expect(text.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil)
        #expect(text.prefix(19) + "Z" == ISO8601DateFormatter().string(from: date))
    }

    /// The `seconds=` of a message's log line: as `String(format: "%.3f")` wrote it.
    @Test(arguments: [0, 1, 5, 999, 1_000, 1_234, 59_999, 3_600_000, 86_400_123])
    func millisecondSecondsAsFormatWroteThem(milliseconds: Int) {
        let duration = Duration.milliseconds(milliseconds)
        #expect(EventRenderer.millisecondSeconds(duration) == String(format: "%.3f", duration.seconds))
    }

    @Test func eventSentencesAndJSONCarryNoTerminalControls() throws {
        let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF", name: "x\u{1B}[31mred\u{9B}\u{202E}")
        let sentence = EventRenderer.sentence(for: .connected(peer))
        #expect(!sentence.unicodeScalars.contains { SafeText.needsEscape($0) })
        #expect(sentence.contains("\\x1b[31mred"))
        let line = EventRenderer.jsonLine(for: .connected(peer))
        #expect(!line.unicodeScalars.contains { SafeText.needsEscape($0) })
        // The JSON value is still the exact name.
        let decoded = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect((decoded?["peer"] as? [String: Any])?["name"] as? String == peer.name)
        let refused = try EventRenderer.decodedJSON(for: .refused(peer, bound: "min-rate", reason: "slow", delay: .seconds(2)))
        #expect(refused["event"] as? String == "refused")
        #expect(refused["bound"] as? String == "min-rate")
        #expect(refused["retrySeconds"] as? Double == 2)
    }

    @Test func aSecureMessageNamesItsPeersKeyInTheSentenceTheJSONAndTheLog() throws {
        // A name in an authorized-peers file is the file owner's text, still escaped.
        let key = AuthenticatedPeer(keyLine: "bletransfer-x25519 AAAA host\u{1B}[2J", fingerprint: "SHA256:abcd-ef01",
                                    name: "host\u{1B}[2J")
        let summary = MessageSummary(sequence: 1, byteCount: 5, format: .secure, sha256: "00", peerKey: key)
        let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF")
        let received = EventRenderer.sentence(for: .received(summary, from: peer, storedAt: "/in/m.txt"))
        #expect(received.contains("secure") && received.contains("key SHA256:abcd-ef01"))
        #expect(!received.unicodeScalars.contains { SafeText.needsEscape($0) })
        let json = try EventRenderer.decodedJSON(for: .received(summary, from: peer, storedAt: "/in/m.txt"))
        let sender = json["sender"] as? [String: Any]
        #expect(sender?["fingerprint"] as? String == "SHA256:abcd-ef01")
        #expect(sender?["key"] as? String == key.keyLine)
        #expect(json["receiver"] == nil)
        let delivered = try EventRenderer.decodedJSON(for: .delivered(summary, to: peer))
        #expect((delivered["receiver"] as? [String: Any])?["fingerprint"] as? String == "SHA256:abcd-ef01")
        #expect(DaemonReporter.metadata(summary)["peer_key"] == "SHA256:abcd-ef01")
        // Without a key, nothing is added.
        let plain = try EventRenderer.decodedJSON(for: .received(MessageSummary(sequence: 1, byteCount: 1, format: .secure),
                                                            from: peer, storedAt: nil))
        #expect(plain["sender"] == nil)
    }

    @Test func theProgressLineNamesTheFileAndPeerAndFitsTheTerminal() {
        let progress = TransferProgress(bytesSoFar: 512 * 1024, totalBytes: 1024 * 1024)
        let wide = EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: "photo.jpg",
                                              peer: "AA:BB:CC:DD:EE:FF (phone)", width: 200)
        #expect(wide == "photo.jpg ↔ AA:BB:CC:DD:EE:FF (phone) [############............]  50% 512.0 KiB of 1.0 MiB"
            + " 20.0 KiB/s 0m25s elapsed ETA 0m25s")
        // Narrower: the peer goes first, then the bar, the name, elapsed, ETA, the rate.
        for width in [100, 80, 60, 40, 30, 20, 10] {
            let line = EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: "photo.jpg",
                                                  peer: "AA:BB:CC:DD:EE:FF (phone)", width: width)
            #expect(line.count <= width, "\(width): \(line)")
            #expect(line.contains(" 50%") || width < 10)
        }
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: "photo.jpg",
                                           peer: "AA:BB:CC:DD:EE:FF (phone)", width: 100)
            == "photo.jpg [############............]  50% 512.0 KiB of 1.0 MiB 20.0 KiB/s 0m25s elapsed ETA 0m25s")
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: "photo.jpg",
                                           peer: "AA:BB:CC:DD:EE:FF (phone)", width: 80)
            == "photo.jpg  50% 512.0 KiB of 1.0 MiB 20.0 KiB/s 0m25s elapsed ETA 0m25s")
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: "photo.jpg",
                                           peer: nil, width: 40) == " 50% 512.0 KiB of 1.0 MiB 20.0 KiB/s")
        // A hostile file name is escaped and cut.
        let hostile = EventRenderer.progressLine(progress, rate: nil, remaining: nil, elapsed: nil,
                                                 label: "x\u{1B}[2J" + String(repeating: "n", count: 60), peer: nil,
                                                 width: 200)
        #expect(!hostile.unicodeScalars.contains { SafeText.needsEscape($0) })
        #expect(hostile.hasPrefix("x\\x1b[2Jnnn") && hostile.contains("…"))
        // The old three-argument form is unchanged.
        #expect(EventRenderer.progressLine(progress, rate: nil, remaining: nil)
            == "[############............]  50% 512.0 KiB of 1.0 MiB")
    }

    @Test func theProgressLineShowsTheLinkAfterTheRate() {
        let progress = TransferProgress(bytesSoFar: 512 * 1024, totalBytes: 1024 * 1024)
        let line = EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: nil,
                                              peer: nil, link: "2M · 15 ms · 251 B", width: 200)
        #expect(line.hasSuffix("20.0 KiB/s · 2M · 15 ms · 251 B 0m25s elapsed ETA 0m25s"))
        // Narrower: the bar, then elapsed time and ETA go before the link, the link before the rate.
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: nil,
                                           peer: nil, link: "2M · 15 ms · 251 B", width: 90)
            == " 50% 512.0 KiB of 1.0 MiB 20.0 KiB/s · 2M · 15 ms · 251 B 0m25s elapsed ETA 0m25s")
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: nil,
                                           peer: nil, link: "2M · 15 ms · 251 B", width: 60)
            == " 50% 512.0 KiB of 1.0 MiB 20.0 KiB/s · 2M · 15 ms · 251 B")
        #expect(EventRenderer.progressLine(progress, rate: 20_480, remaining: 25, elapsed: 25, label: nil,
                                           peer: nil, link: "2M · 15 ms · 251 B", width: 40)
            == " 50% 512.0 KiB of 1.0 MiB 20.0 KiB/s")
    }

    @Test func aLinkReportSaysWhatItRunsAtAndWhatHoldsItBack() throws {
        let report = LinkReport(peer: "AA:BB:CC:DD:EE:FF", phy: "1M", intervalMilliseconds: 50, latency: 0,
                                supervisionTimeoutMilliseconds: 420, dataLength: 251, tuned: false,
                                limits: [.init(setting: "2M PHY", by: "privilege", detail: "needs CAP_NET_ADMIN")])
        #expect(EventRenderer.sentence(for: .link(report))
            == "link to AA:BB:CC:DD:EE:FF: 1M · 50 ms · 251 B (not tuned); 2M PHY: needs CAP_NET_ADMIN")
        let unknown = LinkReport(peer: "AA:BB:CC:DD:EE:FF", tuned: true, unreadable: "needs CAP_NET_RAW")
        #expect(EventRenderer.sentence(for: .link(unknown))
            == "link to AA:BB:CC:DD:EE:FF: parameters unknown (tuned); needs CAP_NET_RAW")
        let json = try EventRenderer.decodedJSON(for: .link(report))
        #expect(json["event"] as? String == "link")
        #expect(json["summary"] as? String == "1M · 50 ms · 251 B")
        #expect(json["intervalMs"] as? Double == 50)
        #expect(json["tuned"] as? Bool == false)
        let limits = try #require(json["limits"] as? [[String: Any]])
        #expect(limits.first?["by"] as? String == "privilege")
    }

    @Test func aMessagesLastLineSaysHowLongItTookAndTheAverageRate() {
        let summary = MessageSummary(sequence: 1, byteCount: 10 * 1024, format: .secure, duration: .seconds(4))
        let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF")
        #expect(EventRenderer.sentence(for: .delivered(summary, to: peer))
            == "message 1 delivered (10.0 KiB, secure) in 4.0s, 2.5 KiB/s on average to AA:BB:CC:DD:EE:FF")
        #expect(EventRenderer.summary(bytes: 10, duration: nil) == "")
        #expect(EventRenderer.summary(bytes: 10, duration: .zero) == "")
    }

    @Test func whileWaitingTheOtherHostsCommandIsNamed() {
        #expect(EventRenderer.waitingHint(for: .advertising(adapter: "hci0", localName: nil))?
            .contains("bletransfer receive") == true)
        #expect(EventRenderer.waitingHint(for: .scanning(adapter: "hci0"))?.contains("bletransfer send") == true)
        #expect(EventRenderer.waitingHint(for: .warning("w")) == nil)
    }
}


extension EventRenderer {
    /// The event's JSON line, decoded.
    static func decodedJSON(for event: RoleEvent) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(jsonLine(for: event).utf8)) as? [String: Any])
    }
}
