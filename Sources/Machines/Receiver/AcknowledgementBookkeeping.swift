import Trust

/// What a receiver keeps about its ACKs within and across visits (pure values the shell keeps).

/// A message acknowledged by a write command, until the sender's answer shows the ACK arrived.
package struct UnconfirmedAcknowledgement: Sendable {
    package var message: UInt32
    package var digest: [UInt8]
    package var storedAt: String?
    /// The sender as the receipt journal names it.
    package var sender: String
}

/// A stored message whose sender may not have seen the ACK.
package struct UnacknowledgedMessage: Sendable, Equatable {
    package var digest: [UInt8]
    package var storedAt: String?
    /// The sender as the receipt journal names it (nil: not journalled).
    package var sender: String?
}

/// ACKs written as write commands in a session and not yet shown to have arrived.
package struct UnconfirmedAcknowledgements: Sendable {
    package var pending: [UnconfirmedAcknowledgement] = []

    package init() {}

    /// Takes out the ACKs `assembly` shows arrived: a HEADER of message m those up to m − `PipelineWindow.messages`
    /// (the sender starts no message while that many await their ACKs), the sender's CLOSE all of them.
    package mutating func takeConfirmed(by assembly: MessageAssembly) -> [UnconfirmedAcknowledgement] {
        takeConfirmed(highestHeader: assembly.highestHeaderNumber, senderClosed: assembly.senderClosed)
    }

    package mutating func takeConfirmed(highestHeader: UInt32?, senderClosed: Bool) -> [UnconfirmedAcknowledgement] {
        guard !pending.isEmpty else { return [] }
        let answered: [UnconfirmedAcknowledgement]
        if senderClosed {
            answered = pending
        } else if let highest = highestHeader, highest >= PipelineWindow.messages {
            answered = pending.filter { $0.message <= highest - UInt32(PipelineWindow.messages) }
        } else {
            answered = []
        }
        pending.removeAll { ack in answered.contains { $0.message == ack.message } }
        return answered
    }
}

/// A table of at most `capacity` peer addresses: a new one past the bound drops the oldest, so
/// rotating addresses cannot grow it (the caller says what a dropped entry costs).
package struct BoundedAddressTable<Value: Sendable>: Sendable {
    package let capacity: Int
    private var values: [String: Value] = [:]
    /// Addresses in the order they were first set, oldest first.
    private var order: [String] = []

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    package subscript(address: String) -> Value? { values[address] }

    package var count: Int { values.count }

    package mutating func set(_ value: Value, for address: String) {
        if values.updateValue(value, forKey: address) == nil { order.append(address) }
        while order.count > capacity {
            values.removeValue(forKey: order.removeFirst())
        }
    }

    @discardableResult
    package mutating func removeValue(for address: String) -> Value? {
        guard let value = values.removeValue(forKey: address) else { return nil }
        order.removeAll { $0 == address }
        return value
    }
}
