/// The notification values of one message in Apple's flow (compat), in order: the payload in values of at most
/// `maximumValueLength` bytes, then `EOM`. No value before it equals `EOM`: final 3 bytes that would form one go as
/// two values (`EO`, `M`). Values are cut lazily (a 64 MiB message is never a list of chunks); a file is read by the
/// caller (`payloadWanted`, `providePayload`). A new subscription starts again from byte 0 with a new sender.
package struct MessageSender: Sendable {
    /// The longest value this sender produces (ATT MTU − 3, within 20...512).
    package let maximumValueLength: Int
    /// Values in all, `EOM` included (for a file, at most: whether its last 3 bytes form `EOM` is known once read).
    package let valueCount: Int

    private let payload: MessagePayload
    private var window = PayloadWindow()
    /// Why the file could not be read: no `EOM` went out (the receiver keeps nothing of a message without its end).
    package private(set) var readFailure: String?
    package private(set) var bytesSent = 0
    package private(set) var valuesSent = 0
    package private(set) var isFinished = false

    /// `maximumValueLength`: ATT MTU − 3 (``WireFormat/valueLength(forATTMTU:)``), brought within
    /// 20...512 (every ATT bearer carries 20; no attribute value exceeds 512).
    package init(message: OutgoingMessage, maximumValueLength: Int) {
        let payload = message.body
        let valueLength = WireFormat.clampValueLength(maximumValueLength)
        self.payload = payload
        self.maximumValueLength = valueLength
        // Data values cut at full length, one more when the tail must be split, then EOM.
        let eomLength = WireFormat.endOfMessage.count
        let dataValues = (payload.count + valueLength - 1) / valueLength
        let tailMayBeEndOfMessage = payload.count % valueLength == eomLength
            && payload.inMemory.map { Array($0.suffix(eomLength)) == WireFormat.endOfMessage } ?? true
        valueCount = dataValues + (tailMayBeEndOfMessage ? 1 : 0) + 1
    }

    package var progress: TransferProgress {
        TransferProgress(bytesSoFar: bytesSent, totalBytes: payload.count)
    }

    /// File bytes the next value needs, for `providePayload`; nil when none.
    package var payloadWanted: Range<Int>? {
        guard !isFinished, readFailure == nil, bytesSent < payload.count else { return nil }
        return window.wanted(bytesSent..<min(payload.count, bytesSent + maximumValueLength), in: payload)
    }

    /// Bytes of the payload's file read at `offset`, as `payloadWanted` asked.
    package mutating func providePayload(_ bytes: [UInt8], at offset: Int) {
        window.keep(bytes, at: offset)
    }

    /// The payload's file could not be read: no value more, no `EOM`.
    package mutating func payloadUnreadable(_ reason: String) {
        readFailure = reason
    }

    /// The next value, `EOM` last, then nil (also while file bytes are wanted). Keep a value until
    /// written (retry the same one on back-pressure): calling again moves on.
    package mutating func nextValue() -> [UInt8]? {
        if isFinished || readFailure != nil { return nil }
        let remaining = payload.count - bytesSent
        if remaining == 0 {
            isFinished = true
            valuesSent += 1
            return WireFormat.endOfMessage
        }
        var length = min(maximumValueLength, remaining)
        guard var value = window.bytes(bytesSent..<(bytesSent + length), of: payload) else { return nil }
        if length == remaining && value == WireFormat.endOfMessage {
            length -= 1
            value.removeLast()
        }
        bytesSent += length
        valuesSent += 1
        return value
    }
}
