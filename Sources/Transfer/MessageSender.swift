/// Produces, in order, the notification values that carry one message to one subscriber in
/// Apple's flow (compat): the payload in values of at most `maximumValueLength` bytes, then a
/// value equal to `EOM`. No value before it equals `EOM`: a payload whose final 3 bytes would
/// form one sends them as two values (`EO`, `M`).
///
/// The values are cut lazily from the payload: a 64 MiB message is never turned into a list of
/// chunks. A new subscription starts the message again from byte 0 with a new sender.
public struct MessageSender: Sendable {
    /// The longest value this sender produces (ATT MTU − 3, within 20...512).
    public let maximumValueLength: Int
    /// Number of values, `EOM` included, this sender produces in all.
    public let valueCount: Int

    private let payload: MessagePayload
    /// Reads the payload as the values go: one read per window for a payload in a file.
    private var reader: PayloadWindowReader
    /// The payload's file could not be read: the values stopped before `EOM` (the receiver
    /// keeps nothing of a message without its end), and this says why.
    public private(set) var readFailure: PayloadReadError?
    public private(set) var bytesSent = 0
    public private(set) var valuesSent = 0
    public private(set) var isFinished = false

    /// - Parameter maximumValueLength: ATT MTU − 3 for the subscriber (see
    ///   ``WireFormat/valueLength(forATTMTU:)``); values outside 20...512 are brought within it,
    ///   since every ATT bearer carries 20 and no attribute value exceeds 512.
    public init(message: OutgoingMessage, maximumValueLength: Int) {
        self.init(payload: message.body, maximumValueLength: maximumValueLength)
    }

    public init(payload: [UInt8], maximumValueLength: Int) {
        self.init(payload: MessagePayload(payload), maximumValueLength: maximumValueLength)
    }

    private init(payload: MessagePayload, maximumValueLength: Int) {
        let valueLength = WireFormat.clampValueLength(maximumValueLength)
        self.payload = payload
        reader = PayloadWindowReader(payload)
        self.maximumValueLength = valueLength
        // Data values cut at full length, one more when the tail must be split, then EOM.
        let eomLength = WireFormat.endOfMessage.count
        let dataValues = (payload.count + valueLength - 1) / valueLength
        let tailIsEndOfMessage = payload.count % valueLength == eomLength
            && (try? payload.bytes(in: (payload.count - eomLength)..<payload.count)) == WireFormat.endOfMessage
        valueCount = dataValues + (tailIsEndOfMessage ? 1 : 0) + 1
    }

    public var progress: TransferProgress {
        TransferProgress(bytesSoFar: bytesSent, totalBytes: payload.count)
    }

    /// The next value to notify, `EOM` last, then nil. Keep a value until it was written (on
    /// back-pressure, retry the same value): calling again moves on.
    public mutating func nextValue() -> [UInt8]? {
        if isFinished || readFailure != nil { return nil }
        let remaining = payload.count - bytesSent
        if remaining == 0 {
            isFinished = true
            valuesSent += 1
            return WireFormat.endOfMessage
        }
        var length = min(maximumValueLength, remaining)
        var value: [UInt8]
        do {
            value = try reader.bytes(in: bytesSent..<(bytesSent + length))
        } catch {
            readFailure = error
            return nil
        }
        if length == remaining && value == WireFormat.endOfMessage {
            length -= 1
            value.removeLast()
        }
        bytesSent += length
        valuesSent += 1
        return value
    }
}
