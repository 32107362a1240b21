@testable import Machines
import Testing

/// `SessionShare`: the fairness rule of a framed session, counted in what a waiting central
/// is denied (Sources/Machines/Sender/SessionShare.swift).
@Suite struct SessionShareTests {
    @Test func aSessionNobodyWaitsForGoesOnUpToItsMessageLimit() {
        var share = SessionShare(messageLimit: 3, byteLimit: 1 << 20)
        #expect(share.mayStartAnother())
        share.delivered(payloadBytes: 10)
        share.delivered(payloadBytes: 10)
        #expect(share.mayStartAnother())
        #expect(!share.mayStartAnother(pendingMessages: 1), "the message under way would be the third")
        share.delivered(payloadBytes: 10)
        #expect(!share.mayStartAnother())
    }

    @Test func theByteLimitEndsASessionOfLargeMessages() {
        var share = SessionShare(messageLimit: 256, byteLimit: 1000)
        share.delivered(payloadBytes: 600)
        #expect(share.mayStartAnother())
        #expect(!share.mayStartAnother(pendingMessages: 1, pendingBytes: 400))
        share.delivered(payloadBytes: 400)
        #expect(!share.mayStartAnother())
    }

    @Test func aCentralTurnedAwayEndsTheSessionAtTheNextMessage() {
        var share = SessionShare(messageLimit: 256, byteLimit: 1 << 30)
        share.delivered(payloadBytes: 4096)
        share.centralTurnedAway()
        #expect(share.centralWaiting)
        #expect(!share.mayStartAnother())
        share.delivered(payloadBytes: 4096)
        #expect(!share.mayStartAnother(), "a waiting central stays waiting until the session ends")
    }

    @Test func timeDoesNotEnterTheRule() {
        // The same messages on a slow link and a fast one: the share is the same.
        var slow = SessionShare(messageLimit: 256, byteLimit: 4 << 20)
        var fast = slow
        for _ in 0..<100 {
            slow.delivered(payloadBytes: 4096)
            fast.delivered(payloadBytes: 4096)
        }
        #expect(slow == fast)
        #expect(slow.mayStartAnother())
    }

    @Test(arguments: [(0, 5), (-3, -1)])
    func limitsBelowOneStillAllowTheFirstMessage(limits: (Int, Int)) {
        let share = SessionShare(messageLimit: limits.0, byteLimit: limits.1)
        #expect(share.mayStartAnother())
    }
}
