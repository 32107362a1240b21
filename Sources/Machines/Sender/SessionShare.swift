/// The fairness rule of a framed session (docs/wire-v2.md, section 4): how much one central
/// may take in a visit before the sender closes the session and the next central in range
/// gets its turn.
///
/// Counted in what a waiting central is denied, not in time: a rule about time cuts a session
/// short on a slow link, where every reconnection costs the most, without anyone waiting
/// having gained. So a session goes on while nobody waits, up to `messageLimit` messages and
/// `byteLimit` payload bytes (what a central that arrives meanwhile is kept from, at most);
/// once a central has been turned away during it (it subscribed, opened the channel or wrote
/// a HELLO while this one was served), no new message starts: the one under way finishes and
/// the session closes. Pure: the connection machine reports what happened, the share decides.
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

    /// One more message of `payloadBytes` delivered in this session.
    package mutating func delivered(payloadBytes: Int) {
        messages += 1
        bytes += max(0, payloadBytes)
    }

    /// Another central was refused while this session was served.
    package mutating func centralTurnedAway() {
        centralWaiting = true
    }

    /// Whether the session may start another message once `pending` more (the message under
    /// way, not yet counted, when it asks ahead of that message's ACK) are counted too.
    package func mayStartAnother(pendingMessages pending: Int = 0, pendingBytes: Int = 0) -> Bool {
        !centralWaiting && messages + pending < messageLimit && bytes + pendingBytes < byteLimit
    }
}
