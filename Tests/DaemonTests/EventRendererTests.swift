@testable import Daemon
import DaemonSupport
import Foundation
import Roles
import Testing

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
        let plain = try EventRenderer.decodedJSON(for: .received(MessageSummary(sequence: 1, byteCount: 1, format: .framed),
                                                            from: peer, storedAt: nil))
        #expect(plain["sender"] == nil)
    }
}

extension EventRenderer {
    /// The event's JSON line, decoded.
    static func decodedJSON(for event: RoleEvent) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(jsonLine(for: event).utf8)) as? [String: Any])
    }
}
