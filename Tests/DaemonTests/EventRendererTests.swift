@testable import Daemon
import DaemonSupport
import Foundation
import Roles
import Testing

/// What the CLI and the daemon print for role events.
@Suite struct EventRendererTests {
    @Test func eventSentencesAndJSONCarryNoTerminalControls() throws {
        let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF", name: "x\u{1B}[31mred\u{9B}\u{202E}")
        let sentence = EventRenderer.sentence(for: .connected(peer))
        #expect(!sentence.unicodeScalars.contains { SafeText.needsEscape($0) })
        #expect(sentence.contains("\\x1b[31mred"))
        let line = EventRenderer.encode(EventRenderer.jsonObject(for: .connected(peer)))
        #expect(!line.unicodeScalars.contains { SafeText.needsEscape($0) })
        // The JSON value is still the exact name.
        let decoded = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect((decoded?["peer"] as? [String: Any])?["name"] as? String == peer.name)
        let refused = EventRenderer.jsonObject(for: .refused(peer, bound: "min-rate", reason: "slow", delay: .seconds(2)))
        #expect(refused["event"] as? String == "refused")
        #expect(refused["bound"] as? String == "min-rate")
    }
}
