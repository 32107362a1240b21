/// Produces, in order, the notification values that carry one message to one subscriber.
///
/// The values are cut lazily from the payload (and, when framed, the header before it): a
/// 64 MiB message is never turned into a list of chunks. A new subscription starts the message
/// again from byte 0 with a new sender; the payload array is shared, not copied.
///
/// Every value is at most `maximumValueLength` bytes, the last one is `EOM`, and no value
/// before it equals `EOM`: a stream whose final 3 bytes would form a value `EOM` sends them as
/// two values (`EO`, `M`).
public struct MessageSender: Sendable {
    public enum Format: String, Sendable, Hashable, CaseIterable, Codable {
        /// Apple's sample: payload values, then `EOM`.
        case compat
        /// Ours: header, payload values, `EOM`; acknowledged by an ``Ack``.
        case framed
    }

    public let format: Format
    /// The longest value this sender produces (ATT MTU − 3, within 20...512).
    public let maximumValueLength: Int
    /// The header sent first when framed, nil for compat.
    public let header: FramedHeader?
    /// Number of values, `EOM` included, this sender produces in all.
    public let valueCount: Int
    /// Same as `valueCount`; always known, optional as the roles' contract has it.
    public var totalValues: Int? { valueCount }

    private let encodedHeader: [UInt8]
    private let payload: [UInt8]
    private let streamLength: Int
    private var streamOffset = 0
    public private(set) var valuesSent = 0
    public private(set) var isFinished = false

    /// - Parameters:
    ///   - maximumValueLength: ATT MTU − 3 for the subscriber (see
    ///     ``WireFormat/valueLength(forATTMTU:)``); values outside 20...512 are brought
    ///     within it, since every ATT bearer carries 20 and no attribute value exceeds 512.
    ///   - session: echoed in the framed header; pass the session of the subscriber's HELLO
    ///     (``init(message:replyingTo:maximumValueLength:)`` does this for you). Unused for compat.
    public init(
        payload: [UInt8], format: Format, maximumValueLength: Int, session: SessionID = SessionID(rawValue: 0)
    ) {
        let header = format == .framed ? FramedHeader(session: session, payload: payload) : nil
        self.init(payload: payload, header: header, maximumValueLength: maximumValueLength)
    }

    /// Framed when the subscriber wrote a HELLO, compat otherwise.
    public init(message: OutgoingMessage, replyingTo hello: Hello?, maximumValueLength: Int) {
        self.init(
            payload: message.payload, header: hello.map(message.header(for:)), maximumValueLength: maximumValueLength)
    }

    private init(payload: [UInt8], header: FramedHeader?, maximumValueLength: Int) {
        let encodedHeader = header?.encoded ?? []
        let valueLength = WireFormat.clampValueLength(maximumValueLength)
        let streamLength = encodedHeader.count + payload.count
        self.format = header == nil ? .compat : .framed
        self.header = header
        self.encodedHeader = encodedHeader
        self.payload = payload
        self.maximumValueLength = valueLength
        self.streamLength = streamLength

        // Data values cut at full length, one more when the tail must be split, then EOM.
        let eomLength = WireFormat.endOfMessage.count
        let dataValues = (streamLength + valueLength - 1) / valueLength
        let tailIsEndOfMessage =
            streamLength % valueLength == eomLength
            && Self.streamBytes(encodedHeader, payload, from: streamLength - eomLength, count: eomLength)
                == WireFormat.endOfMessage
        self.valueCount = dataValues + (tailIsEndOfMessage ? 1 : 0) + 1
    }

    /// Payload bytes handed out so far (header bytes not counted).
    public var bytesSent: Int {
        max(0, streamOffset - encodedHeader.count)
    }

    public var progress: TransferProgress {
        TransferProgress(bytesSoFar: bytesSent, totalBytes: payload.count)
    }

    /// The next value to notify, `EOM` last, then nil. Keep a value until it was written (on
    /// back-pressure, retry the same value): calling again moves on.
    public mutating func nextValue() -> [UInt8]? {
        if isFinished { return nil }
        valuesSent += 1
        let remaining = streamLength - streamOffset
        if remaining == 0 {
            isFinished = true
            return WireFormat.endOfMessage
        }
        var length = min(maximumValueLength, remaining)
        var value = Self.streamBytes(encodedHeader, payload, from: streamOffset, count: length)
        if length == remaining && value == WireFormat.endOfMessage {
            length -= 1
            value.removeLast()
        }
        streamOffset += length
        return value
    }

    /// True when `ack` names this sender's session and payload digest.
    public func isAcknowledged(by ack: Ack) -> Bool {
        header.map(ack.acknowledges) ?? false
    }

    /// Bytes `start..<start+count` of header-then-payload, copied into one value.
    private static func streamBytes(
        _ encodedHeader: [UInt8], _ payload: [UInt8], from start: Int, count: Int
    ) -> [UInt8] {
        let end = start + count
        let headerLength = encodedHeader.count
        if start >= headerLength {
            return Array(payload[(start - headerLength)..<(end - headerLength)])
        }
        var value: [UInt8] = []
        value.reserveCapacity(count)
        value.append(contentsOf: encodedHeader[start..<min(end, headerLength)])
        if end > headerLength {
            value.append(contentsOf: payload[0..<(end - headerLength)])
        }
        return value
    }
}
