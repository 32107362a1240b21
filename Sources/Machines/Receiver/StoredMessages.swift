import Trust

/// Stored messages whose ACK the sender may not have seen, across visits: sent again, they are acknowledged, not
/// stored twice. The last `perPeer` (the pipeline window) per address, for at most `addressCapacity` addresses (the
/// oldest goes: stored twice, never lost). Pure: the central's work loop hands each visit its peer's list.
package struct StoredMessages: Sendable {
    package static let addressCapacity = 256
    package static let perPeer = PipelineWindow.messages

    private var table = BoundedAddressTable<[UnacknowledgedMessage]>(capacity: StoredMessages.addressCapacity)

    package init() {}

    package var count: Int { table.count }

    /// The messages remembered for `address`, handed to a visit (which hands them back, `put`).
    package mutating func take(_ address: String) -> [UnacknowledgedMessage] {
        table.removeValue(for: address) ?? []
    }

    package mutating func put(_ messages: [UnacknowledgedMessage], for address: String) {
        guard !messages.isEmpty else { return }
        table.set(messages, for: address)
    }

    /// Adds a message stored whose ACK was not confirmed (its sender may send it again), keeping the last `perPeer`.
    static func append(_ message: UnacknowledgedMessage, to messages: inout [UnacknowledgedMessage]) {
        messages.append(message)
        if messages.count > perPeer { messages.removeFirst(messages.count - perPeer) }
    }

    /// The earlier copy if `digest` is among `messages`, forgotten with those before it (senders resend in order; a
    /// third identical message is new). Any other message: the sender moved on, the records go.
    static func takeEarlierCopy(of digest: [UInt8], from messages: inout [UnacknowledgedMessage]) -> UnacknowledgedMessage? {
        guard let index = messages.firstIndex(where: { $0.digest == digest }) else {
            messages = []
            return nil
        }
        let earlier = messages[index]
        messages.removeFirst(index + 1)
        return earlier
    }
}
