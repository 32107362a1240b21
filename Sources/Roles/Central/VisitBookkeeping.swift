import BlueZ

/// Room on disk for the messages of a visit, checked as they come: a framed message once,
/// with the length its header announces, before any payload is taken; a compat one (no
/// length) about once a second with what has come so far. Refused, the link is dropped before
/// EOM: the sender keeps its copy.
struct AdmissionCheck {
    private var admittedAnnouncement = false
    private var lastCheck: Duration?

    mutating func check(_ assembly: MessageAssembly, at now: Duration, sink: any MessageSink) throws {
        guard !assembly.finished else { return }
        var checked: Int?
        if let announced = assembly.announcedLength, !admittedAnnouncement {
            admittedAnnouncement = true
            checked = announced
        } else if assembly.announcedLength == nil, lastCheck.map({ now - $0 >= .seconds(1) }) ?? true {
            lastCheck = now
            checked = assembly.bytesReceived
        }
        if let checked, let refusal = sink.admissionRefusal(byteCount: checked) {
            throw TransferFailure.refused(bound: refusal.bound.rawValue, reason: refusal.reason)
        }
    }

    /// The next message of the session announces its own length.
    mutating func nextMessage() {
        admittedAnnouncement = false
    }
}

/// ACKs written as write commands in a session and not yet shown to have arrived.
struct UnconfirmedAcknowledgements {
    var pending: [UnconfirmedAcknowledgement] = []

    /// Takes out the ACKs `assembly` shows arrived: a HEADER of message m shows those up to
    /// m − 2 (the window), the sender's CLOSE all of them.
    mutating func takeConfirmed(by assembly: MessageAssembly) -> [UnconfirmedAcknowledgement] {
        guard !pending.isEmpty else { return [] }
        let answered: [UnconfirmedAcknowledgement]
        if assembly.senderClosed {
            answered = pending
        } else if let highest = assembly.highestHeaderNumber, highest >= 2 {
            answered = pending.filter { $0.message <= highest - 2 }
        } else {
            answered = []
        }
        pending.removeAll { ack in answered.contains { $0.message == ack.message } }
        return answered
    }
}

/// A sender's L2CAP channel as its last visit found it: the PSM its service published and the
/// transfer characteristic resolved then.
struct KnownChannel: Sendable {
    var psm: UInt16
    var characteristic: RemoteGATTCharacteristic
}

/// A table keyed by peer address that keeps at most `capacity` addresses: setting a new one
/// past the bound drops the address set longest ago, so rotating (random) addresses cannot grow
/// it. What a dropped entry costs is the caller's to say (a slower visit, a message stored twice).
struct BoundedAddressTable<Value: Sendable>: Sendable {
    let capacity: Int
    private var values: [String: Value] = [:]
    /// Addresses in the order they were first set, oldest first.
    private var order: [String] = []

    init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    subscript(address: String) -> Value? { values[address] }

    var count: Int { values.count }

    mutating func set(_ value: Value, for address: String) {
        if values.updateValue(value, forKey: address) == nil { order.append(address) }
        while order.count > capacity {
            values.removeValue(forKey: order.removeFirst())
        }
    }

    @discardableResult
    mutating func removeValue(for address: String) -> Value? {
        guard let value = values.removeValue(forKey: address) else { return nil }
        order.removeAll { $0 == address }
        return value
    }
}
