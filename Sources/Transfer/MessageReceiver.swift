/// Reassembles one message from notification values, fed one at a time in arrival order.
///
/// **Ordering.** BlueZ with several ATT bearers (EATT) may deliver the notifications of one
/// characteristic out of order. Framed values carry a sequence number and are put back in
/// order here (see ``ReorderBuffer``); `EOM` may overtake the last values, so a framed message
/// completes once its announced length is assembled *and* `EOM` arrived, in either order.
/// Compat values carry nothing to reorder by: they are taken in arrival order.
///
/// **Format detection.** A central that wrote no HELLO receives compat, whatever the bytes are.
/// A central that wrote a HELLO holds values until it can tell:
/// - framed as soon as the value with sequence number 0 arrives, i.e. one starting with
///   `00 00` and the 8-byte ``FramedHeader/magic``; the values held so far are then read as
///   framed values;
/// - compat as soon as a value arrives that cannot be a framed value sent before that one:
///   shorter than 3 bytes, a sequence number of 0 without the magic or beyond the reorder
///   window, or one already seen. Text always decides at once (its first byte is never 0).
/// `EOM` alone decides nothing: it may have overtaken a short framed message's first value.
/// A peer that ignores HELLO and sends an empty message (or one whose values all look like
/// framed values after the first) therefore ends undecided: once the caller has waited longer
/// than reordering could delay a framed sender's values, ``settleAsCompat()`` reads what
/// arrived as a compat message; ended without that, ``finishWithoutEOM()`` reports
/// ``ReceiveError/missingStartOfMessage(valuesReceived:)``. The residual ambiguity: a binary
/// compat payload that begins with `00 00` and the magic is read as framed, and is then refused
/// (version, session or digest will not match) rather than delivered wrongly.
///
/// **Memory** is bounded by ``TransferLimits/maximumMessageSize``, never by what the peer
/// sends: the header, the payload and the values held out of order together never exceed the
/// limit plus the 57-byte header (plus 2 bytes per held value while undecided); a framed header
/// announcing more than the limit is refused before any payload is stored, capacity is reserved
/// only for an announced length within the limit, and a compat stream is refused as soon as it
/// would pass the limit.
public struct MessageReceiver: Sendable {
    public enum Event: Sendable, Equatable {
        /// After each value that did not end the message.
        case progress(TransferProgress)
        /// `EOM` arrived and, when framed, every value up to the announced length arrived and
        /// length and digest were verified.
        case complete(ReceivedMessage)
    }

    private enum Phase: Sendable {
        /// A HELLO was written and no value has told the format yet.
        case undecided
        case compat
        case framed
        case complete
        case failed(ReceiveError)
    }

    public let limits: TransferLimits
    /// The HELLO this central wrote before subscribing, nil when it wrote none.
    public let sentHello: Hello?
    private var phase: Phase
    /// Values held while undecided, in arrival order, and their sequence numbers if framed.
    private var undecidedValues: [[UInt8]] = []
    private var undecidedSequences: Set<UInt16> = []
    private var undecidedByteCount = 0
    /// Framed: header bytes until the header is complete, then the header.
    private var headerBytes: [UInt8] = []
    private var header: FramedHeader?
    private var reorder = ReorderBuffer()
    private var payload: [UInt8] = []
    /// Values received so far, `EOM` included.
    public private(set) var valuesReceived = 0
    /// True once `EOM` arrived (framed: possibly before the last values).
    public private(set) var endOfMessageSeen = false
    /// While undecided: how many held values had arrived when `EOM` did.
    private var undecidedValuesAtEndOfMessage: Int?

    /// A receiver that expects compat only (the central wrote no HELLO).
    public init(limits: TransferLimits = .default) {
        self.init(limits: limits, sentHello: nil)
    }

    /// - Parameter sentHello: the HELLO this central wrote before subscribing, if any; only
    ///   then is a framed answer recognised, and only with that HELLO's session id.
    public init(limits: TransferLimits = .default, sentHello: Hello?) {
        self.limits = limits
        self.sentHello = sentHello
        self.phase = sentHello == nil ? .compat : .undecided
    }

    /// nil until a value told the format (the first one, unless a HELLO was written and the
    /// first values arrived out of order or look like framed values).
    public private(set) var detectedFormat: MessageSender.Format?

    /// Payload bytes assembled in order so far; the total once a framed header announced it.
    public var progress: TransferProgress {
        switch phase {
        case .complete:
            completedProgress
        default:
            TransferProgress(bytesSoFar: payload.count, totalBytes: header?.payloadLength)
        }
    }
    private var completedProgress = TransferProgress(bytesSoFar: 0, totalBytes: nil)

    /// Bytes held for the message in progress; never more than the limit plus the header, plus
    /// 2 bytes per value (at most ``WireFormat/reorderWindow``) while the format is undecided.
    public var bufferedByteCount: Int {
        undecidedByteCount + headerBytes.count + payload.count + reorder.heldByteCount
    }

    /// Framed values that arrived ahead of a missing one and wait for it.
    public var valuesHeldOutOfOrder: Int { reorder.heldCount + undecidedValues.count }

    public var isComplete: Bool {
        if case .complete = phase { return true }
        return false
    }

    /// True when a HELLO was written, `EOM` arrived, and no value has told the format yet.
    public var isUndecidedAfterEndOfMessage: Bool {
        if case .undecided = phase { return endOfMessageSeen }
        return false
    }

    /// Reads an undecided message that `EOM` ended as compat: the peer ignored the HELLO. Call it
    /// only after waiting longer than reordering can delay a framed sender's first value behind
    /// its `EOM` (a framed sender never sends `EOM` before that value). Nil when there is
    /// nothing to settle (not undecided, or `EOM` not seen); refused as
    /// ``ReceiveError/missingStartOfMessage(valuesReceived:)`` when values arrived after the
    /// `EOM`, since no compat sender sends those.
    public mutating func settleAsCompat() throws(ReceiveError) -> Event? {
        guard isUndecidedAfterEndOfMessage else { return nil }
        guard undecidedValuesAtEndOfMessage == undecidedValues.count else {
            throw fail(.missingStartOfMessage(valuesReceived: valuesReceived))
        }
        phase = .compat
        detectedFormat = .compat
        let held = undecidedValues
        releaseUndecided()
        for value in held { _ = try receiveCompat(value) }
        return try receiveCompat(WireFormat.endOfMessage)
    }

    /// Takes the next notification value.
    public mutating func receive(_ value: [UInt8]) throws(ReceiveError) -> Event {
        valuesReceived += 1
        switch phase {
        case .failed(let error):
            throw error
        case .complete:
            throw fail(.valueAfterEndOfMessage)
        case .undecided:
            return try receiveUndecided(value)
        case .compat:
            detectedFormat = .compat
            return try receiveCompat(value)
        case .framed:
            return try receiveFramed(value)
        }
    }

    /// The error to report when the sender unsubscribed or disconnected, or went quiet: nil when
    /// the message was complete, otherwise why it is not (the earlier error, a missing `EOM`, or
    /// values missing before an `EOM` that did arrive). Afterwards the receiver refuses further
    /// values.
    public mutating func finishWithoutEOM() -> ReceiveError? {
        switch phase {
        case .complete:
            return nil
        case .failed(let error):
            return error
        case .undecided where endOfMessageSeen:
            return fail(.missingStartOfMessage(valuesReceived: valuesReceived))
        case .framed where endOfMessageSeen:
            if let header {
                return fail(.truncatedPayload(received: payload.count, announced: header.payloadLength))
            }
            return fail(.truncatedHeader(receivedBytes: headerBytes.count))
        case .undecided, .compat, .framed:
            return fail(.missingEndOfMessage(received: payload.count, announced: header?.payloadLength))
        }
    }

    // MARK: - Undecided (a HELLO was written)

    private mutating func receiveUndecided(_ value: [UInt8]) throws(ReceiveError) -> Event {
        if value == WireFormat.endOfMessage {
            // It may have overtaken a short framed message's values: wait for them.
            guard !endOfMessageSeen else { throw fail(.valueAfterEndOfMessage) }
            endOfMessageSeen = true
            undecidedValuesAtEndOfMessage = undecidedValues.count
            return .progress(progress)
        }
        if Self.isFramedStart(value) {
            phase = .framed
            detectedFormat = .framed
            let held = undecidedValues
            releaseUndecided()
            var event = try receiveFramed(value)
            for value in held {
                guard case .framed = phase else { throw fail(.valueAfterEndOfMessage) }
                event = try receiveFramed(value)
            }
            return event
        }
        if value.count > WireFormat.framedSequenceLength {
            let sequence = WireFormat.sequenceNumber(of: value[...])
            if sequence != 0, Int(sequence) < WireFormat.reorderWindow, !undecidedSequences.contains(sequence) {
                // Could be a framed value that overtook the first one.
                let framedStreamBytes =
                    undecidedByteCount + value.count - WireFormat.framedSequenceLength * (undecidedValues.count + 1)
                guard framedStreamBytes <= FramedHeader.encodedLength + limits.maximumMessageSize else {
                    // Too long for either format.
                    throw fail(.compatMessageTooLarge(limit: limits.maximumMessageSize))
                }
                undecidedValues.append(value)
                undecidedSequences.insert(sequence)
                undecidedByteCount += value.count
                return .progress(progress)
            }
        }
        // No framed sender sends this before its first value: a peer that ignored the HELLO.
        guard !endOfMessageSeen else { throw fail(.valueAfterEndOfMessage) }
        phase = .compat
        detectedFormat = .compat
        let held = undecidedValues
        releaseUndecided()
        for value in held { _ = try receiveCompat(value) }
        return try receiveCompat(value)
    }

    /// Sequence number 0 followed by the header magic.
    private static func isFramedStart(_ value: [UInt8]) -> Bool {
        let magicStart = WireFormat.framedSequenceLength
        return value.count >= magicStart + FramedHeader.magic.count && value[0] == 0 && value[1] == 0
            && value[magicStart..<(magicStart + FramedHeader.magic.count)].elementsEqual(FramedHeader.magic)
    }

    private mutating func releaseUndecided() {
        undecidedValues = []
        undecidedSequences = []
        undecidedByteCount = 0
    }

    // MARK: - Compat

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

    // MARK: - Framed

    private mutating func receiveFramed(_ value: [UInt8]) throws(ReceiveError) -> Event {
        if value == WireFormat.endOfMessage {
            guard !endOfMessageSeen else { throw fail(.valueAfterEndOfMessage) }
            endOfMessageSeen = true
            return try completeIfAssembled()
        }
        guard value.count > WireFormat.framedSequenceLength else {
            throw fail(.malformedFramedValue(length: value.count))
        }
        let sequence = WireFormat.sequenceNumber(of: value[...])
        let piece = value[WireFormat.framedSequenceLength...]
        do {
            switch try reorder.place(sequence) {
            case .next:
                try appendToStream(piece)
                reorder.advance()
                while let next = reorder.takeNext() { try appendToStream(next) }
                try checkStreamBound(adding: 0)
            case .ahead:
                try checkStreamBound(adding: piece.count)
                reorder.hold(piece, sequence: sequence)
            }
        } catch {
            throw fail(error)
        }
        return try completeIfAssembled()
    }

    /// Refuses a stream whose bytes (assembled and held) would pass what a valid message can
    /// hold: the header plus the announced length, or plus the limit before the header is in.
    private func checkStreamBound(adding count: Int) throws(ReceiveError) {
        let assembled = header == nil ? headerBytes.count : FramedHeader.encodedLength + payload.count
        let total = assembled + reorder.heldByteCount + count
        if let header {
            guard total <= FramedHeader.encodedLength + header.payloadLength else {
                throw .dataAfterAnnouncedLength(announced: header.payloadLength)
            }
        } else {
            guard total <= FramedHeader.encodedLength + limits.maximumMessageSize else {
                throw .compatMessageTooLarge(limit: limits.maximumMessageSize)
            }
        }
    }

    private mutating func completeIfAssembled() throws(ReceiveError) -> Event {
        guard endOfMessageSeen, let header, payload.count == header.payloadLength, reorder.heldCount == 0 else {
            return .progress(progress)
        }
        let computed = FramedHeader.sha256(payload)
        guard computed == header.digest else {
            throw fail(.digestMismatch(announced: header.digest, computed: computed))
        }
        return complete(ReceivedMessage(payload: payload, format: .framed, header: header))
    }

    /// Appends the next piece of the header-then-payload stream, in order.
    private mutating func appendToStream(_ piece: ArraySlice<UInt8>) throws(ReceiveError) {
        var rest = piece
        if header == nil {
            let taken = rest.prefix(FramedHeader.encodedLength - headerBytes.count)
            headerBytes.append(contentsOf: taken)
            rest = rest.dropFirst(taken.count)
            // The version is checked as soon as it arrives: a later version may lay out the
            // rest of its header differently.
            if headerBytes.count > FramedHeader.versionOffset {
                let version = headerBytes[FramedHeader.versionOffset]
                guard version == WireFormat.framedVersion else { throw .unsupportedVersion(version) }
            }
            let expectedSession = sentHello?.session ?? SessionID(rawValue: 0)
            if headerBytes.count >= FramedHeader.lengthOffset {
                let session = SessionID(bigEndianBytes: headerBytes[FramedHeader.sessionOffset...])
                guard session == expectedSession else {
                    throw .sessionMismatch(expected: expectedSession, received: session)
                }
            }
            guard headerBytes.count == FramedHeader.encodedLength else { return }
            let decoded = try FramedHeader.decode(headerBytes, expectedSession: expectedSession, limits: limits)
            headerBytes = []
            payload.reserveCapacity(decoded.payloadLength)
            header = decoded
        }
        guard let header, !rest.isEmpty else { return }
        guard rest.count <= header.payloadLength - payload.count else {
            throw .dataAfterAnnouncedLength(announced: header.payloadLength)
        }
        payload.append(contentsOf: rest)
    }

    private mutating func complete(_ message: ReceivedMessage) -> Event {
        completedProgress = TransferProgress(bytesSoFar: message.payload.count, totalBytes: message.header?.payloadLength)
        phase = .complete
        release()
        return .complete(message)
    }

    /// Enters the failed state, releasing the buffers, and returns `error` for throwing.
    private mutating func fail(_ error: ReceiveError) -> ReceiveError {
        phase = .failed(error)
        release()
        return error
    }

    private mutating func release() {
        payload = []
        headerBytes = []
        reorder.removeAll()
        releaseUndecided()
    }
}
