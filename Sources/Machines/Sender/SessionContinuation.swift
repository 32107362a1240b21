/// What a multi session does once the current message's ACK was counted: whether to ask the
/// source for another, and whether the session goes on with it or closes. Pure.
///
/// The fairness rule (``SessionShare``) decides whether a new message may start; a message sent
/// ahead (pipeline) started under it earlier and becomes current whatever it says now, even after
/// a hang-up: its ACK may still come within the hang-up's grace, as this one's did.
package struct SessionContinuation: Sendable, Hashable {
    /// The central hung up before its ACK was handled (a socket beats a D-Bus call): it counts, nothing new is sent.
    package var centralLeft: Bool
    /// The central did not close the session in the write that carried the ACK.
    package var wantsNext: Bool
    /// A message is already under way behind the acknowledged one (pipeline).
    package var hasSentAhead: Bool
    /// The fairness rule lets another message start (``SessionShare/mayStartAnother``).
    package var shareAllowsAnother: Bool

    /// The message sent ahead becomes the current one.
    package var takesSentAhead: Bool { hasSentAhead && wantsNext }

    package var asksForNext: Bool { takesSentAhead || (shareAllowsAnother && wantsNext && !centralLeft) }

    package enum Decision: Sendable, Hashable {
        /// The session ends with the acknowledged message. `recordedAfterHangUp`: the central had left (the delivery
        /// is told, which ends the subscription); `othersGetATurn`: the fairness rule ended it (worth a log line).
        case close(recordedAfterHangUp: Bool, othersGetATurn: Bool)
        /// The next message becomes current, under a fresh delivery and bound. `hangUpAfterwards`: the central left
        /// with the message sent ahead outstanding; told of the hang-up, it counts only if its ACK comes in the grace.
        case goOn(hangUpAfterwards: Bool)
    }

    /// The next step, given the source's answer and the subscription by then (asked across a suspension).
    /// `hasNext`: the source gave a message (false when not asked); `nextIsForThisPeer`: it may go to this peer;
    /// `subscriptionStillCurrent`: not shutting down, still the current one; `hungUpByNow`: the central hung up.
    package func decide(hasNext: Bool, nextIsForThisPeer: Bool, subscriptionStillCurrent: Bool,
                        hungUpByNow: Bool) -> Decision {
        if centralLeft && !takesSentAhead {
            return .close(recordedAfterHangUp: true, othersGetATurn: false)
        }
        guard hasNext, nextIsForThisPeer, subscriptionStillCurrent, !hungUpByNow || takesSentAhead else {
            return .close(recordedAfterHangUp: centralLeft, othersGetATurn: !shareAllowsAnother && subscriptionStillCurrent)
        }
        return .goOn(hangUpAfterwards: centralLeft && takesSentAhead)
    }
}
