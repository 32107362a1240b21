/// Produces, in order, the notification values that carry one message to one subscriber.
///
/// The values are cut lazily from the payload (and, when framed, the header before it): a
/// 64 MiB message is never turned into a list of chunks. A new subscription starts the message
/// again from byte 0 with a new sender; the payload array is shared, not copied.
///
/// Every value is at most `maximumValueLength` bytes, the last one is `EOM`, and no value
/// before it equals `EOM`.
///
/// - Compat: payload slices; a stream whose final 3 bytes would form a value `EOM` sends them as
///   two values (`EO`, `M`).
/// - Framed: header and payload form one byte stream cut into pieces of at most
///   `maximumValueLength − 2` bytes; value *i* is `[i mod 65536, big-endian (2 bytes)][piece i]`,
///   so the receiver can restore the order when notifications overtake each other. Only a
///   3-byte value (1-byte last piece) could equal `EOM` (sequence number 0x454F, piece `M`);
///   then the piece before it gives up one byte, making the last value 4 bytes long.
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
    private let payload: MessagePayload
    /// Reads the payload as the values go: one read per window for a payload in a file.
    private var reader: PayloadWindowReader
    /// The payload's file could not be read: the values stopped before `EOM` (the receiver
    /// keeps nothing of a message without its end), and this says why.
    public private(set) var readFailure: PayloadReadError?
    private let streamLength: Int
    /// Stream bytes per value: the whole value for compat, less the sequence number for framed.
    private let pieceLength: Int
    /// The framed value cut one byte short so the last value cannot equal `EOM`.
    private let shortenedValueIndex: Int?
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
        self.init(payload: MessagePayload(payload), header: header, maximumValueLength: maximumValueLength)
    }

    /// Framed when the subscriber wrote a HELLO, compat otherwise.
    public init(message: OutgoingMessage, replyingTo hello: Hello?, maximumValueLength: Int) {
        self.init(
            payload: message.body, header: hello.map(message.header(for:)), maximumValueLength: maximumValueLength)
    }

    private init(payload: MessagePayload, header: FramedHeader?, maximumValueLength: Int) {
        let encodedHeader = header?.encoded ?? []
        let valueLength = WireFormat.clampValueLength(maximumValueLength)
        let streamLength = encodedHeader.count + payload.count
        self.format = header == nil ? .compat : .framed
        self.header = header
        self.encodedHeader = encodedHeader
        self.payload = payload
        self.reader = PayloadWindowReader(payload)
        self.maximumValueLength = valueLength
        self.streamLength = streamLength

        let eomLength = WireFormat.endOfMessage.count
        if header == nil {
            // Data values cut at full length, one more when the tail must be split, then EOM.
            let dataValues = (streamLength + valueLength - 1) / valueLength
            let tailIsEndOfMessage =
                streamLength % valueLength == eomLength
                && (try? Self.streamBytes(encodedHeader, payload, from: streamLength - eomLength, count: eomLength))
                    == WireFormat.endOfMessage
            self.pieceLength = valueLength
            self.shortenedValueIndex = nil
            self.valueCount = dataValues + (tailIsEndOfMessage ? 1 : 0) + 1
        } else {
            // The stream is at least the 57-byte header, so there are always two or more data
            // values when the last piece is a single byte, and the piece before it can spare one.
            let pieceLength = valueLength - WireFormat.framedSequenceLength
            let dataValues = (streamLength + pieceLength - 1) / pieceLength
            let lastIndex = dataValues - 1
            let lastPieceLength = streamLength - lastIndex * pieceLength
            let lastValue =
                Self.sequenceBytes(lastIndex)
                + ((try? Self.streamBytes(encodedHeader, payload, from: streamLength - lastPieceLength,
                                          count: lastPieceLength)) ?? [])
            self.pieceLength = pieceLength
            self.shortenedValueIndex = lastValue == WireFormat.endOfMessage ? lastIndex - 1 : nil
            self.valueCount = dataValues + 1
        }
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
        if isFinished || readFailure != nil { return nil }
        do {
            return try cutNextValue()
        } catch {
            readFailure = error
            return nil
        }
    }

    private mutating func cutNextValue() throws(PayloadReadError) -> [UInt8]? {
        let index = valuesSent
        valuesSent += 1
        let remaining = streamLength - streamOffset
        if remaining == 0 {
            isFinished = true
            return WireFormat.endOfMessage
        }
        var length = min(pieceLength, remaining)
        guard header == nil else {
            if index == shortenedValueIndex { length -= 1 }
            var value = Self.sequenceBytes(index)
            value.reserveCapacity(WireFormat.framedSequenceLength + length)
            try Self.appendStreamBytes(encodedHeader, &reader, from: streamOffset, count: length, to: &value)
            streamOffset += length
            return value
        }
        var value = try Self.streamBytes(encodedHeader, &reader, from: streamOffset, count: length)
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

    /// The framed sequence number of the value at `index` (it wraps every 65536 values).
    private static func sequenceBytes(_ index: Int) -> [UInt8] {
        let sequence = UInt16(truncatingIfNeeded: index)
        return [UInt8(sequence >> 8), UInt8(truncatingIfNeeded: sequence)]
    }

    /// Bytes `start..<start+count` of header-then-payload, copied into one value.
    private static func streamBytes(
        _ encodedHeader: [UInt8], _ payload: MessagePayload, from start: Int, count: Int
    ) throws(PayloadReadError) -> [UInt8] {
        var reader = PayloadWindowReader(payload)
        return try streamBytes(encodedHeader, &reader, from: start, count: count)
    }

    private static func streamBytes(
        _ encodedHeader: [UInt8], _ reader: inout PayloadWindowReader, from start: Int, count: Int
    ) throws(PayloadReadError) -> [UInt8] {
        if start >= encodedHeader.count {
            return try reader.bytes(in: (start - encodedHeader.count)..<(start + count - encodedHeader.count))
        }
        var value: [UInt8] = []
        value.reserveCapacity(count)
        try appendStreamBytes(encodedHeader, &reader, from: start, count: count, to: &value)
        return value
    }

    private static func appendStreamBytes(
        _ encodedHeader: [UInt8], _ reader: inout PayloadWindowReader, from start: Int, count: Int, to value: inout [UInt8]
    ) throws(PayloadReadError) {
        let end = start + count
        let headerLength = encodedHeader.count
        if start < headerLength {
            value.append(contentsOf: encodedHeader[start..<min(end, headerLength)])
        }
        if end > headerLength {
            value.append(contentsOf: try reader.bytes(in: max(0, start - headerLength)..<(end - headerLength)))
        }
    }
}
