@testable import Machines
import Testing

/// `AcknowledgementPlan`: how the receiver writes a sealed ACK and where it books the message
/// until something shows the ACK arrived (Sources/Machines/Receiver/AcknowledgementPlan.swift).
@Suite struct AcknowledgementPlanTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var label: String
        var overChannel = false
        var offeredAsCommand = false
        var commandAllowed = false
        var sessionGoesOn = false
        var pipelines = false
        var lastWanted = false
        // What the plan must say.
        var asCommand: Bool
        var settles: Bool
        var booking: AcknowledgementPlan.Booking
        var testDescription: String { label }
    }

    static let cases: [Case] = [
        Case(label: "GATT, one message, write requests offered: the reply confirms it",
             asCommand: false, settles: false, booking: .writeReply),
        Case(label: "GATT, one message, write commands only: nothing confirms it, the link gets a moment",
             offeredAsCommand: true, commandAllowed: true, asCommand: true, settles: true, booking: .nothing),
        Case(label: "channel, the visit's last message: the sender's close confirms it",
             overChannel: true, offeredAsCommand: true, asCommand: true, settles: false, booking: .channelClose),
        Case(label: "channel, a pipelined session that goes on: the sender's answer confirms it",
             overChannel: true, offeredAsCommand: true, sessionGoesOn: true, pipelines: true,
             asCommand: true, settles: false, booking: .senderAnswer),
        Case(label: "GATT, pipelined session, commands allowed: a command, the answer confirms it",
             commandAllowed: true, sessionGoesOn: true, pipelines: true, asCommand: true, settles: false, booking: .senderAnswer),
        Case(label: "GATT, pipelined session, requests only: a request, its reply confirms it",
             sessionGoesOn: true, pipelines: true, asCommand: false, settles: false, booking: .writeReply),
        Case(label: "GATT, session without a pipeline: a request, its reply confirms it",
             commandAllowed: true, sessionGoesOn: true, asCommand: false, settles: false, booking: .writeReply),
        Case(label: "channel, the last wanted message of a session that would go on: closing, the close confirms it",
             overChannel: true, offeredAsCommand: true, sessionGoesOn: true, pipelines: true, lastWanted: true,
             asCommand: true, settles: false, booking: .channelClose),
    ]

    @Test(arguments: cases)
    func thePlanSaysHowToWriteAndWhereToBook(_ expected: Case) {
        let plan = AcknowledgementPlan(
            overChannel: expected.overChannel, offeredAsCommand: expected.offeredAsCommand,
            commandAllowed: expected.commandAllowed, sessionGoesOn: expected.sessionGoesOn,
            pipelines: expected.pipelines, lastWanted: expected.lastWanted)
        #expect(plan.asCommand == expected.asCommand)
        #expect(plan.settles == expected.settles)
        #expect(plan.closing == expected.lastWanted)
        #expect(plan.booking(written: true) == expected.booking)
    }

    @Test func aWriteRequestThatFailedProvesNothingButOtherBookingsStand() {
        let request = AcknowledgementPlan(overChannel: false, offeredAsCommand: false, commandAllowed: false,
                                          sessionGoesOn: false, pipelines: false, lastWanted: false)
        #expect(request.booking(written: false) == .nothing)
        let channel = AcknowledgementPlan(overChannel: true, offeredAsCommand: true, commandAllowed: false,
                                          sessionGoesOn: false, pipelines: false, lastWanted: false)
        #expect(channel.booking(written: false) == .channelClose)
    }
}
