/// How the receiver writes a stored message's sealed ACK, and what will show it arrived. Pure.
///
/// A message whose ACK the sender never saw comes again, and must then be known as stored (and acknowledged, not
/// stored twice): an ACK is kept in mind until a write reply, the sender's answer in a session that goes on (next
/// HEADER, CLOSE), or over a channel the sender's close after the visit's last write shows it arrived.
package struct AcknowledgementPlan: Sendable, Equatable {
    /// What shows the ACK arrived.
    package enum Booking: Sendable, Equatable {
        /// The write request's reply (from the sender's application): the receipt is done.
        case writeReply
        /// The sender closing the channel after the visit's last write.
        case channelClose
        /// The sender's answer: its next HEADER shows ACKs up to two messages back (the window), its CLOSE all.
        case senderAnswer
        /// Nothing: the message is remembered as stored, not to store it twice if offered again.
        case nothing
    }

    /// Written as a command (nothing answers) rather than a request.
    package let asCommand: Bool
    /// A CLOSE goes with the ACK (the run's last wanted message): the sender stops; what it started next stays.
    package let closing: Bool
    /// The central waits a moment after the write: a Disconnect may overtake an unanswered command in bluetoothd.
    package let settles: Bool
    private let booking: Booking

    /// `overChannel`: every write is an SDU, nothing answers it; `offeredAsCommand`: the offered
    /// write type is a command; `commandAllowed`: write commands are taken; `sessionGoesOn`: another
    /// message may follow; `pipelines`: the next may start before this ACK; `lastWanted`: the run's last.
    package init(overChannel: Bool, offeredAsCommand: Bool, commandAllowed: Bool, sessionGoesOn: Bool,
                 pipelines: Bool, lastWanted: Bool) {
        closing = lastWanted
        let senderAnswers = sessionGoesOn && !lastWanted
        // With a pipeline the answer comes anyway, so the ACK need not wait for a write reply.
        let answeredLater = senderAnswers && pipelines && (overChannel || commandAllowed)
        asCommand = answeredLater || offeredAsCommand
        settles = asCommand && !overChannel && !senderAnswers
        if !asCommand {
            booking = .writeReply
        } else if overChannel && !senderAnswers {
            booking = .channelClose
        } else if answeredLater {
            booking = .senderAnswer
        } else {
            booking = .nothing
        }
    }

    /// Where the message is booked once the write was tried: a failed request proved nothing.
    package func booking(written: Bool) -> Booking {
        booking == .writeReply && !written ? .nothing : booking
    }
}
