/// Produces, in order, the notification values that carry one message to one subscriber in
/// Apple's flow (compat): the payload in values of at most `maximumValueLength` bytes, then a
/// value equal to `EOM`. No value before it equals `EOM`: a payload whose final 3 bytes would
/// form one sends them as two values (`EO`, `M`).
///
/// The values are cut lazily from the payload: a 64 MiB message is never turned into a list of
/// chunks. A payload in a file is not read here: `nextValue` returns nil while `payloadWanted`
/// names the bytes it needs, which the caller reads and hands over (`providePayload`). A new
/// subscription starts the message again from byte 0 with a new sender.
package struct MessageSender: Sendable {
    /// The longest value this sender produces (ATT MTU − 3, within 20...512).
    package let maximumValueLength: Int
    /// Number of values, `EOM` included, this sender produces in all (for a payload in a file,
    /// at most this: whether its last 3 bytes form `EOM` is known once they are read).
    package let valueCount: Int

    private let payload: MessagePayload
    private var window = PayloadWindow()
    /// The payload's file could not be read: the values stopped before `EOM` (the receiver
    /// keeps nothing of a message without its end), and this says why.
    package private(set) var readFailure: String?
    package private(set) var bytesSent = 0
    package private(set) var valuesSent = 0
    package private(set) var isFinished = false

    /// - Parameter maximumValueLength: ATT MTU − 3 for the subscriber (see
    ///   ``WireFormat/valueLength(forATTMTU:)``); values outside 20...512 are brought within it,
    ///   since every ATT bearer carries 20 and no attribute value exceeds 512.
    package init(message: OutgoingMessage, maximumValueLength: Int) {
        self.init(payload: message.body, maximumValueLength: maximumValueLength)
    }

    package init(payload: [UInt8], maximumValueLength: Int) {
        self.init(payload: MessagePayload(payload), maximumValueLength: maximumValueLength)
    }

    private init(payload: MessagePayload, maximumValueLength: Int) {
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

    /// The bytes of the payload's file the next value needs, to be read and handed over with
    /// `providePayload`; nil when none is wanted.
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

    /// The next value to notify, `EOM` last, then nil (also while the payload's bytes are
    /// wanted). Keep a value until it was written (on back-pressure, retry the same value):
    /// calling again moves on.
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
