import Machines
import Transfer

/// One fixed message, served `count` times (nil: forever). What `bletransfer send` uses.
package actor RepeatingMessageSource: MessageSource {
    package let message: OutgoingMessage
    /// How many deliveries end the run; nil never ends it.
    package let count: Int?
    package private(set) var deliveredCount = 0

    package init(message: OutgoingMessage, count: Int?) {
        precondition(count.map { $0 >= 0 } ?? true, "a negative message count")
        self.message = message
        self.count = count
    }

    package func current() async -> OutgoingMessage? {
        if let count, deliveredCount >= count { return nil }
        return message
    }

    package func nextAvailableNow() async -> OutgoingMessage? { await current() }

    /// The next repetition, while more than those awaiting their ACKs are wanted.
    package func upcomingNow(skipping sentAhead: Int) async -> OutgoingMessage? {
        if let count, deliveredCount + 1 + sentAhead >= count { return nil }
        return message
    }

    package func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async {
        deliveredCount += 1
    }
}
