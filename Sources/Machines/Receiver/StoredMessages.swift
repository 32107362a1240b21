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

    /// A message stored whose ACK was not confirmed: its sender may send it again.
    package mutating func remember(_ message: UnacknowledgedMessage, from address: String) {
        var messages = table[address] ?? []
        Self.append(message, to: &messages)
        table.set(messages, for: address)
    }

    /// The earlier copy if `digest` is an unconfirmed message from `address`, forgotten with those before it (senders
    /// resend in order; a third identical message is new). Any other message: the sender moved on, the records go.
    package mutating func takeEarlierCopy(from address: String, digest: [UInt8]) -> UnacknowledgedMessage? {
        var messages = take(address)
        let earlier = Self.takeEarlierCopy(of: digest, from: &messages)
        if !messages.isEmpty { table.set(messages, for: address) }
        return earlier
    }

    /// The messages remembered for `address`, handed to a visit (which hands them back, `put`).
    package mutating func take(_ address: String) -> [UnacknowledgedMessage] {
        table.removeValue(for: address) ?? []
    }

    package mutating func put(_ messages: [UnacknowledgedMessage], for address: String) {
        guard !messages.isEmpty else { return }
        table.set(messages, for: address)
    }

    static func append(_ message: UnacknowledgedMessage, to messages: inout [UnacknowledgedMessage]) {
        messages.append(message)
        if messages.count > perPeer { messages.removeFirst(messages.count - perPeer) }
    }

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
