import Trust

/// What the receiver remembers across visits of the messages it stored whose ACK the sender may
/// not have seen: a sender sends such a message again, and it must then be acknowledged, not
/// stored twice. Per sender address, the last `perPeer` (the sender's pipeline window), for at
/// most `addressCapacity` addresses (rotating addresses cannot grow it: the oldest entry goes,
/// and its sender may then get its message stored twice, never lost). Pure: the central's work
/// loop keeps it and hands each visit its peer's list (`ReceiverVisit`).
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

    /// The earlier copy when `digest` is a message from `address` whose ACK was not confirmed
    /// (forgotten then, with those remembered before it: a sender sends again in order, so it
    /// has moved past them; a third identical message is a new one); nil otherwise. Any other
    /// message from that peer means the sender moved on, so the records go too.
    package mutating func takeEarlierCopy(from address: String, digest: [UInt8]) -> UnacknowledgedMessage? {
        var messages = take(address)
        let earlier = Self.takeEarlierCopy(of: digest, from: &messages)
        if !messages.isEmpty { table.set(messages, for: address) }
        return earlier
    }

    /// The messages remembered for `address`, handed to a visit (which hands back what it
    /// remembers then, `put`).
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
