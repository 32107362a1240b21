/// Reassembles one message from notification values, fed one at a time in arrival order.
///
/// **Format detection.** A central that wrote no HELLO receives compat, whatever the bytes are.
/// A central that wrote a HELLO passes it here; the first value is then framed when it starts
/// with the 8-byte ``FramedHeader/magic`` and compat otherwise (a peer that ignores HELLO, such
/// as Apple's sample). The only residual ambiguity: a peer that ignores HELLO and sends a
/// binary payload that itself begins with those 8 bytes is read as framed, and is then refused
/// (version, session or digest will not match) rather than delivered wrongly. Text payloads
/// cannot collide: the magic starts with 0x89, which never begins UTF-8 text.
///
/// **Memory** is bounded by ``TransferLimits/maximumMessageSize``, never by what the peer
/// sends: a framed header announcing more is refused before any payload is stored, capacity is
/// reserved only for an announced length within the limit, and a compat stream is refused as
/// soon as it would pass the limit.
public struct MessageReceiver: Sendable {
    public enum Event: Sendable, Equatable {
        /// After each value that did not end the message.
        case progress(TransferProgress)
        /// `EOM` arrived and, when framed, length and digest were verified.
        case complete(ReceivedMessage)
    }

    private enum Phase: Sendable {
        case awaitingFirstValue
        case compat
        case framedHeader
        case framedPayload(FramedHeader)
        case complete
        case failed(ReceiveError)
    }

    public let limits: TransferLimits
    /// The HELLO this central wrote before subscribing, nil when it wrote none.
    public let sentHello: Hello?
    private var phase: Phase = .awaitingFirstValue
    private var headerBytes: [UInt8] = []
    private var payload: [UInt8] = []
    /// Values received so far, `EOM` included.
    public private(set) var valuesReceived = 0

    /// A receiver that expects compat only (the central wrote no HELLO).
    public init(limits: TransferLimits = .default) {
        self.init(limits: limits, sentHello: nil)
    }

    /// - Parameter sentHello: the HELLO this central wrote before subscribing, if any; only
    ///   then is a framed answer recognised, and only with that HELLO's session id.
    public init(limits: TransferLimits = .default, sentHello: Hello?) {
        self.limits = limits
        self.sentHello = sentHello
    }

    /// nil until the first value arrived.
    public private(set) var detectedFormat: MessageSender.Format?

    /// Payload bytes so far; the total once a framed header announced it.
    public var progress: TransferProgress {
        switch phase {
        case .framedPayload(let header):
            TransferProgress(bytesSoFar: payload.count, totalBytes: header.payloadLength)
        case .complete:
            completedProgress
        default:
            TransferProgress(bytesSoFar: payload.count, totalBytes: nil)
        }
    }
    private var completedProgress = TransferProgress(bytesSoFar: 0, totalBytes: nil)

    /// Bytes held for the message in progress; never more than the limit plus the header.
    public var bufferedByteCount: Int { headerBytes.count + payload.count }

    public var isComplete: Bool {
        if case .complete = phase { return true }
        return false
    }

    /// Takes the next notification value.
    public mutating func receive(_ value: [UInt8]) throws(ReceiveError) -> Event {
        valuesReceived += 1
        switch phase {
        case .failed(let error):
            throw error
        case .complete:
            throw fail(.valueAfterEndOfMessage)
        case .awaitingFirstValue:
            if sentHello != nil, value.starts(with: FramedHeader.magic) {
                phase = .framedHeader
                detectedFormat = .framed
                return try receiveFramed(value)
            }
            phase = .compat
            detectedFormat = .compat
            return try receiveCompat(value)
        case .compat:
            return try receiveCompat(value)
        case .framedHeader, .framedPayload:
            return try receiveFramed(value)
        }
    }

    /// The error to report when the sender unsubscribed or disconnected: nil when the message
    /// was complete, otherwise why it is not (the earlier error, or a missing `EOM`). Afterwards
    /// the receiver refuses further values.
    public mutating func finishWithoutEOM() -> ReceiveError? {
        switch phase {
        case .complete:
            return nil
        case .failed(let error):
            return error
        case .framedPayload(let header):
            return fail(.missingEndOfMessage(received: payload.count, announced: header.payloadLength))
        case .awaitingFirstValue, .compat, .framedHeader:
            return fail(.missingEndOfMessage(received: payload.count, announced: nil))
        }
    }

    private mutating func receiveCompat(_ value: [UInt8]) throws(ReceiveError) -> Event {
        if value == WireFormat.endOfMessage {
            return complete(ReceivedMessage(payload: payload, format: .compat))
        }
        let needed = payload.count + value.count
        guard needed <= limits.maximumMessageSize else {
            throw fail(.compatMessageTooLarge(limit: limits.maximumMessageSize))
        }
        if needed > payload.capacity {
            // Grow geometrically, but never past the limit.
            payload.reserveCapacity(min(limits.maximumMessageSize, max(needed, 2 * payload.capacity, 256)))
        }
        payload.append(contentsOf: value)
        return .progress(progress)
    }

    private mutating func receiveFramed(_ value: [UInt8]) throws(ReceiveError) -> Event {
        if value == WireFormat.endOfMessage {
            switch phase {
            case .framedPayload(let header):
                guard payload.count == header.payloadLength else {
                    throw fail(.truncatedPayload(received: payload.count, announced: header.payloadLength))
                }
                let computed = FramedHeader.sha256(payload)
                guard computed == header.digest else {
                    throw fail(.digestMismatch(announced: header.digest, computed: computed))
                }
                return complete(ReceivedMessage(payload: payload, format: .framed, header: header))
            default:
                throw fail(.truncatedHeader(receivedBytes: headerBytes.count))
            }
        }

        var rest = value[...]
        if case .framedHeader = phase {
            let taken = rest.prefix(FramedHeader.encodedLength - headerBytes.count)
            headerBytes.append(contentsOf: taken)
            rest = rest.dropFirst(taken.count)
            // The version is checked as soon as it arrives: a later version may lay out the
            // rest of its header differently.
            if headerBytes.count > FramedHeader.versionOffset {
                let version = headerBytes[FramedHeader.versionOffset]
                guard version == WireFormat.framedVersion else { throw fail(.unsupportedVersion(version)) }
            }
            let expectedSession = sentHello?.session ?? SessionID(rawValue: 0)
            if headerBytes.count >= FramedHeader.lengthOffset {
                let session = SessionID(bigEndianBytes: headerBytes[FramedHeader.sessionOffset...])
                guard session == expectedSession else {
                    throw fail(.sessionMismatch(expected: expectedSession, received: session))
                }
            }
            guard headerBytes.count == FramedHeader.encodedLength else { return .progress(progress) }
            let header: FramedHeader
            do {
                header = try FramedHeader.decode(headerBytes, expectedSession: expectedSession, limits: limits)
            } catch {
                throw fail(error)
            }
            headerBytes = []
            payload.reserveCapacity(header.payloadLength)
            phase = .framedPayload(header)
        }
        guard case .framedPayload(let header) = phase else { return .progress(progress) }
        guard rest.count <= header.payloadLength - payload.count else {
            throw fail(.dataAfterAnnouncedLength(announced: header.payloadLength))
        }
        payload.append(contentsOf: rest)
        return .progress(progress)
    }

    private mutating func complete(_ message: ReceivedMessage) -> Event {
        completedProgress = TransferProgress(bytesSoFar: message.payload.count, totalBytes: message.header?.payloadLength)
        phase = .complete
        payload = []
        headerBytes = []
        return .complete(message)
    }

    /// Enters the failed state, releasing the buffers, and returns `error` for throwing.
    private mutating func fail(_ error: ReceiveError) -> ReceiveError {
        phase = .failed(error)
        payload = []
        headerBytes = []
        return error
    }
}
