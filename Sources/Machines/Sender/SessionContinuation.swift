/// What a multi session does once the central's ACK of its current message has been counted:
/// whether the sender asks its source for another message, and, given the answer, whether the
/// session goes on with it or closes. Pure: the connection machine says what it knows, this decides.
///
/// Two rules meet here. The fairness rule (``SessionShare``) decides whether a new message
/// may start. A message sent ahead (pipeline) started under that rule earlier and becomes the
/// current one whatever the rule says now, even when the central has hung up meanwhile: its
/// ACK may still come within the grace a hang-up gives, as this one's did.
package struct SessionContinuation: Sendable, Hashable {
    /// The central hung up before its ACK was handled (a socket's end can overtake a D-Bus
    /// call); the ACK still counts, but nothing new is sent.
    package var centralLeft: Bool
    /// The central did not close the session in the write that carried the ACK.
    package var wantsNext: Bool
    /// A message is already under way behind the acknowledged one (pipeline).
    package var hasSentAhead: Bool
    /// The fairness rule lets another message start (``SessionShare/mayStartAnother``).
    package var shareAllowsAnother: Bool

    package init(centralLeft: Bool, wantsNext: Bool, hasSentAhead: Bool, shareAllowsAnother: Bool) {
        self.centralLeft = centralLeft
        self.wantsNext = wantsNext
        self.hasSentAhead = hasSentAhead
        self.shareAllowsAnother = shareAllowsAnother
    }

    /// The message sent ahead becomes the current one.
    package var takesSentAhead: Bool { hasSentAhead && wantsNext }

    /// Whether to ask the source for the next message at all.
    package var asksForNext: Bool { takesSentAhead || (shareAllowsAnother && wantsNext && !centralLeft) }

    package enum Decision: Sendable, Hashable {
        /// The session ends with the acknowledged message.
        /// - `recordedAfterHangUp`: the central had left; its delivery machine is told that
        ///   the message was counted after the hang-up, which ends the subscription.
        /// - `othersGetATurn`: the fairness rule ended it (worth a line in the log).
        case close(recordedAfterHangUp: Bool, othersGetATurn: Bool)
        /// The next message becomes the current one, under a fresh delivery and bound.
        /// - `hangUpAfterwards`: the central had left with the message sent ahead
        ///   outstanding; once set up, it is told of the hang-up, so that message counts only
        ///   if its ACK comes within the grace.
        case goOn(hangUpAfterwards: Bool)
    }

    /// The session's next step, given what the source answered and what the connection knows of
    /// the subscription by then (the source is asked across a suspension, so the subscription
    /// may have changed meanwhile).
    ///
    /// - Parameters:
    ///   - hasNext: the source gave a next message (false when it was not asked, ``asksForNext``
    ///     being false);
    ///   - nextIsForThisPeer: that message may go to this session's peer;
    ///   - subscriptionStillCurrent: the connection is not shutting down, and the subscription is
    ///     still the current one;
    ///   - hungUpByNow: the subscription has seen the central hang up by now.
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
