/// How the receiver writes the sealed ACK of a stored message, and what will show that it
/// arrived. Pure: the central gives the facts of the link and the session, writes as the plan
/// says and books the message where `booking(written:)` tells.
///
/// What is at stake: a message whose ACK the sender never saw comes again. The receiver must
/// then know it is stored already (and acknowledge it, not store it twice), so an ACK is kept
/// in mind until something shows it arrived: the reply to a write request, the sender's answer
/// in a session that goes on (its next HEADER, or its CLOSE), or, over a channel, the sender
/// closing it after the visit's last write.
package struct AcknowledgementPlan: Sendable, Equatable {
    /// What shows the ACK arrived.
    package enum Booking: Sendable, Equatable {
        /// The write request's reply (from the sender's application): the receipt is done.
        case writeReply
        /// The sender closing the channel after the visit's last write.
        case channelClose
        /// The sender's answer in a session that goes on: its next HEADER shows the ACKs up to
        /// two messages back (the window), its CLOSE all of them.
        case senderAnswer
        /// Nothing: the message is remembered as stored, so that it is not stored twice if the
        /// sender offers it again.
        case nothing
    }

    /// Written as a command (nothing answers) rather than a request.
    package let asCommand: Bool
    /// A CLOSE goes with the ACK: the last message this run wants, so the sender stops (what
    /// it started next stays to be sent again).
    package let closing: Bool
    /// After the write, the central waits a moment before it may leave: a command that nothing
    /// will answer may still be queued in bluetoothd when a Disconnect overtakes it.
    package let settles: Bool
    private let booking: Booking

    /// - Parameters:
    ///   - overChannel: the visit runs over the L2CAP channel (every write is an SDU, nothing
    ///     answers it).
    ///   - offeredAsCommand: the write type the characteristic offers is a command.
    ///   - commandAllowed: the characteristic takes write commands.
    ///   - sessionGoesOn: the sender may send another message in this session.
    ///   - pipelines: the session lets the sender start the next message before this ACK.
    ///   - lastWanted: this is the last message the run wants.
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

    /// Where the message is booked once the write was tried: a request that failed proved
    /// nothing.
    package func booking(written: Bool) -> Booking {
        booking == .writeReply && !written ? .nothing : booking
    }
}
