@testable import Machines
import Testing

/// What the receiver remembers across visits of the messages it stored whose ACK the sender
/// may not have seen (`StoredMessages`).
@Suite struct StoredMessagesTests {
    @Test func theSameMessageAgainAfterAnUnconfirmedAckIsRecognisedOnce() {
        var state = StoredMessages()
        let digest = Array(repeating: UInt8(7), count: 32)
        state.remember(UnacknowledgedMessage(digest: digest, storedAt: "/in/message-1.bin"), from: "00:AA:01:00:00:42")
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: digest)
                == UnacknowledgedMessage(digest: digest, storedAt: "/in/message-1.bin"))
        // A third identical message (its ACK went through this time) is a new message.
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: digest) == nil)
    }

    @Test func anotherMessageFromThatPeerMeansItMovedOn() {
        var state = StoredMessages()
        let first = Array(repeating: UInt8(1), count: 32), second = Array(repeating: UInt8(2), count: 32)
        state.remember(UnacknowledgedMessage(digest: first, storedAt: nil), from: "00:AA:01:00:00:42")
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: second) == nil)
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: first) == nil)
    }

    @Test func bothMessagesOfAPipelinedWindowAreRecognisedWhenSentAgainInOrder() {
        var state = StoredMessages()
        let (first, second, third) = (Array(repeating: UInt8(1), count: 32), Array(repeating: UInt8(2), count: 32),
                                      Array(repeating: UInt8(3), count: 32))
        // Three ACKs failed: only the last two (the window) are kept.
        state.remember(UnacknowledgedMessage(digest: first, storedAt: "/in/a"), from: "00:AA:01:00:00:42")
        state.remember(UnacknowledgedMessage(digest: second, storedAt: "/in/b"), from: "00:AA:01:00:00:42")
        state.remember(UnacknowledgedMessage(digest: third, storedAt: "/in/c"), from: "00:AA:01:00:00:42")
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: second)?.storedAt == "/in/b")
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: third)?.storedAt == "/in/c")
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: third) == nil)
    }

    @Test func aSenderThatGotTheFirstAckResendsOnlyTheSecond() {
        var state = StoredMessages()
        let (first, second) = (Array(repeating: UInt8(1), count: 32), Array(repeating: UInt8(2), count: 32))
        state.remember(UnacknowledgedMessage(digest: first, storedAt: nil), from: "00:AA:01:00:00:42")
        state.remember(UnacknowledgedMessage(digest: second, storedAt: nil), from: "00:AA:01:00:00:42")
        // The second is recognised; the first is dropped with it (the sender moved past it).
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: second) != nil)
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: first) == nil)
    }

    @Test func peersAreKeptApart() {
        var state = StoredMessages()
        let digest = Array(repeating: UInt8(3), count: 32)
        state.remember(UnacknowledgedMessage(digest: digest, storedAt: nil), from: "00:AA:01:00:00:42")
        #expect(state.takeEarlierCopy(from: "00:AA:01:01:00:42", digest: digest) == nil)
        #expect(state.takeEarlierCopy(from: "00:AA:01:00:00:42", digest: digest) != nil)
    }

    @Test func theTableIsBoundedByAddresses() {
        var state = StoredMessages()
        for index in 0..<(StoredMessages.addressCapacity + 100) {
            state.remember(UnacknowledgedMessage(digest: [UInt8(index & 0xFF)], storedAt: nil), from: "addr-\(index)")
        }
        #expect(state.count == StoredMessages.addressCapacity)
        // The newest survive, the oldest went.
        let newest = StoredMessages.addressCapacity + 99
        #expect(state.takeEarlierCopy(from: "addr-\(newest)", digest: [UInt8(newest & 0xFF)]) != nil)
        #expect(state.takeEarlierCopy(from: "addr-0", digest: [0]) == nil)
    }
}

/// One peer's messages remembered and looked up as a visit does it: taken out of the table, handed back.
extension StoredMessages {
    mutating func remember(_ message: UnacknowledgedMessage, from address: String) {
        var messages = take(address)
        Self.append(message, to: &messages)
        put(messages, for: address)
    }

    mutating func takeEarlierCopy(from address: String, digest: [UInt8]) -> UnacknowledgedMessage? {
        var messages = take(address)
        let earlier = Self.takeEarlierCopy(of: digest, from: &messages)
        put(messages, for: address)
        return earlier
    }
}
