@testable import Machines
import Testing
import Trust

/// `UnconfirmedAcknowledgements`: which ACKs written as write commands the sender's answer shows
/// arrived (Sources/Machines/Receiver/AcknowledgementBookkeeping.swift). A sender starts no
/// message while `PipelineWindow.messages` await their ACKs, so its HEADER of message m shows
/// the ACKs up to m − window arrived, and not one after.
@Suite struct UnconfirmedAcknowledgementsTests {
    static func pending(_ numbers: ClosedRange<UInt32>) -> UnconfirmedAcknowledgements {
        var acknowledgements = UnconfirmedAcknowledgements()
        acknowledgements.pending = numbers.map {
            UnconfirmedAcknowledgement(message: $0, digest: [UInt8](repeating: UInt8($0), count: 32), storedAt: nil,
                                       sender: "00:AA:01:00:00:42")
        }
        return acknowledgements
    }

    @Test(arguments: 0...UInt32(8))
    func aHeaderShowsTheAcknowledgementsAWindowBehindIt(highest: UInt32) {
        var acknowledgements = Self.pending(0...8)
        let window = UInt32(PipelineWindow.messages)
        let confirmed = acknowledgements.takeConfirmed(highestHeader: highest, senderClosed: false).map(\.message)
        let expected: [UInt32] = highest >= window ? Array(0...(highest - window)) : []
        #expect(confirmed == expected)
        #expect(acknowledgements.pending.map(\.message) == Array(expected.count...8).map { UInt32($0) })
        // Asked again with the same HEADER, nothing more is confirmed.
        #expect(acknowledgements.takeConfirmed(highestHeader: highest, senderClosed: false).isEmpty)
    }

    @Test func theSendersCloseShowsThemAllAndNoHeaderShowsNone() {
        var acknowledgements = Self.pending(3...5)
        #expect(acknowledgements.takeConfirmed(highestHeader: nil, senderClosed: false).isEmpty)
        #expect(acknowledgements.takeConfirmed(highestHeader: 5, senderClosed: true).map(\.message) == [3, 4, 5])
        #expect(acknowledgements.pending.isEmpty)
    }
}
