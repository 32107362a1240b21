/// The fairness rule of a framed session (docs/wire-v2.md, section 4): how much one central may
/// take in a visit before the next central in range gets its turn. Pure.
///
/// Counted in what a waiting central is denied, not in time (a time rule cuts sessions short on slow links, where
/// reconnecting costs most, with nobody gaining): a session goes on while nobody waits, up to `messageLimit` messages
/// and `byteLimit` bytes; once a central was turned away, no new message starts and the session closes after it.
package struct SessionShare: Sendable, Hashable {
    package let messageLimit: Int
    package let byteLimit: Int
    /// Messages and payload bytes counted as delivered in this session.
    package private(set) var messages = 0
    package private(set) var bytes = 0
    /// A central was turned away while this session was served: it is waiting for its turn.
    package private(set) var centralWaiting = false

    package init(messageLimit: Int, byteLimit: Int) {
        self.messageLimit = max(1, messageLimit)
        self.byteLimit = max(1, byteLimit)
    }

    package mutating func delivered(payloadBytes: Int) {
        messages += 1
        bytes += max(0, payloadBytes)
    }

    package mutating func centralTurnedAway() {
        centralWaiting = true
    }

    /// Another message may start, counting `pending` more too (the one under way, asked ahead of its ACK).
    package func mayStartAnother(pendingMessages pending: Int = 0, pendingBytes: Int = 0) -> Bool {
        !centralWaiting && messages + pending < messageLimit && bytes + pendingBytes < byteLimit
    }
}
