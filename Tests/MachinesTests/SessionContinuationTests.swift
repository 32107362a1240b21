@testable import Machines
import Testing

/// `SessionContinuation`: what a multi session does after the central's ACK of its current
/// message (Sources/Machines/Sender/SessionContinuation.swift).
@Suite struct SessionContinuationTests {
    /// What the server knows once the source has answered.
    struct Answer: Sendable {
        var hasNext = true
        var nextIsForThisPeer = true
        var subscriptionStillCurrent = true
        var hungUpByNow = false
    }

    static let goodAnswer = Answer()
    static let noNext = Answer(hasNext: false, nextIsForThisPeer: false)

    static func continuation(left: Bool = false, wantsNext: Bool = true, sentAhead: Bool = false,
                             fair: Bool = true) -> SessionContinuation {
        SessionContinuation(centralLeft: left, wantsNext: wantsNext, hasSentAhead: sentAhead, shareAllowsAnother: fair)
    }

    @Test func aSessionWithItsShareLeftAsksForTheNextMessageAndGoesOnWithIt() {
        let continuation = Self.continuation()
        #expect(continuation.asksForNext)
        #expect(continuation.deciding(Self.goodAnswer) == .goOn(hangUpAfterwards: false))
        #expect(continuation.deciding(Self.noNext) == .close(recordedAfterHangUp: false, othersGetATurn: false),
                "nothing ready now: the session closes, and that is not the fairness rule")
    }

    @Test func aCentralThatClosedInTheSameWriteIsSentNothingMore() {
        for sentAhead in [false, true] {
            let continuation = Self.continuation(wantsNext: false, sentAhead: sentAhead)
            #expect(!continuation.asksForNext)
            #expect(!continuation.takesSentAhead)
            #expect(continuation.deciding(Self.noNext) == .close(recordedAfterHangUp: false, othersGetATurn: false))
        }
    }

    /// The fairness rule closes a session (and says so), but a message already sent ahead
    /// becomes current whatever the rule says now; a central that left gets its ACK recorded
    /// and nothing new.
    @Test(arguments: [
        (continuation(fair: false), false, noNext, SessionContinuation.Decision.close(recordedAfterHangUp: false, othersGetATurn: true)),
        (continuation(sentAhead: true, fair: false), true, goodAnswer, .goOn(hangUpAfterwards: false)),
        (continuation(left: true), false, goodAnswer, .close(recordedAfterHangUp: true, othersGetATurn: false)),
    ])
    func theRuleTheSentAheadMessageAndAHangUp(continuation: SessionContinuation, asks: Bool, answer: Answer,
                                              decision: SessionContinuation.Decision) {
        #expect(continuation.asksForNext == asks)
        #expect(continuation.deciding(answer) == decision)
    }

    @Test func aCentralThatLeftWithAMessageSentAheadKeepsItUnderTheHangUpGrace() {
        let continuation = Self.continuation(left: true, sentAhead: true)
        #expect(continuation.asksForNext)
        var answer = Self.goodAnswer
        answer.hungUpByNow = true
        #expect(continuation.deciding(answer) == .goOn(hangUpAfterwards: true))
    }

    @Test func aNextMessageForAnotherPeerWaitsForThatPeersVisit() {
        var answer = Self.goodAnswer
        answer.nextIsForThisPeer = false
        #expect(Self.continuation().deciding(answer) == .close(recordedAfterHangUp: false, othersGetATurn: false))
    }

    @Test func aSubscriptionReplacedOrShutDownMeanwhileIsNotContinued() {
        var answer = Self.goodAnswer
        answer.subscriptionStillCurrent = false
        #expect(Self.continuation().deciding(answer) == .close(recordedAfterHangUp: false, othersGetATurn: false))
        #expect(Self.continuation(fair: false).deciding(answer) == .close(recordedAfterHangUp: false, othersGetATurn: false),
                "the fairness line is for a session that is still ours")
        answer = Self.goodAnswer
        answer.hungUpByNow = true
        #expect(Self.continuation().deciding(answer) == .close(recordedAfterHangUp: false, othersGetATurn: false),
                "a hang-up during the source's answer ends a session with nothing sent ahead")
    }

    /// Every combination of what the server knows: the invariants hold in all of them.
    @Test(arguments: 0..<256)
    func invariants(bits: Int) {
        func bit(_ index: Int) -> Bool { bits & (1 << index) != 0 }
        let continuation = SessionContinuation(centralLeft: bit(0), wantsNext: bit(1), hasSentAhead: bit(2),
                                               shareAllowsAnother: bit(3))
        let answer = Answer(hasNext: bit(4) && continuation.asksForNext, nextIsForThisPeer: bit(5),
                            subscriptionStillCurrent: bit(6), hungUpByNow: bit(7))
        let decision = continuation.deciding(answer)
        switch decision {
        case .goOn(let hangUpAfterwards):
            #expect(continuation.asksForNext && answer.hasNext && answer.nextIsForThisPeer && answer.subscriptionStillCurrent)
            #expect(continuation.wantsNext, "a central that closed is sent nothing more")
            #expect(!continuation.centralLeft || continuation.takesSentAhead, "nothing new starts for a central that left")
            #expect(continuation.shareAllowsAnother || continuation.takesSentAhead, "only a message sent ahead overrides the rule")
            #expect(hangUpAfterwards == continuation.centralLeft)
        case .close(let recordedAfterHangUp, let othersGetATurn):
            #expect(recordedAfterHangUp == continuation.centralLeft, "a counted ACK after a hang-up is always recorded")
            #expect(!othersGetATurn || !continuation.shareAllowsAnother)
        }
    }
}

extension SessionContinuation {
    func deciding(_ answer: SessionContinuationTests.Answer) -> Decision {
        decide(hasNext: answer.hasNext, nextIsForThisPeer: answer.nextIsForThisPeer,
               subscriptionStillCurrent: answer.subscriptionStillCurrent, hungUpByNow: answer.hungUpByNow)
    }
}
