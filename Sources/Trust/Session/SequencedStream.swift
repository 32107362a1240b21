/// The value layer under a version-2 session, both ways (docs/wire-v2.md, section 1): `sequence
/// (2, big-endian, wrapping) | piece`, the next bytes of one stream; notifications end with a bare `EOM`.
package enum SequencedStream {
    /// The value that ends the notification stream, as in Apple's flow.
    static let endOfMessage: [UInt8] = [0x45, 0x4F, 0x4D]  // "EOM"
    static let sequenceLength = 2
    /// How far ahead of the next needed value one may arrive.
    package static let reorderWindow = 256
    /// Every ATT bearer carries 20 bytes; no attribute value exceeds 512.
    static let valueLengths = 20...512
    /// Over an L2CAP channel a value is one SDU of up to 8 KiB: a 4 KiB DATA record and its
    /// neighbours travel in one, the per-value system calls paid once per several KiB.
    package static let channelValueLengths = 20...8192

    static func clampValueLength(_ length: Int, overChannel: Bool = false) -> Int {
        let range = overChannel ? channelValueLengths : valueLengths
        return min(max(length, range.lowerBound), range.upperBound)
    }
}

/// Cuts an outgoing byte stream into sequence-numbered values, full length except at a flush. Every piece holds at
/// least 2 bytes, so no value is 3 bytes long and none can equal `EOM`: a full piece is cut only while 2 bytes stay
/// behind it, and a flush segment one byte longer than a piece goes out as `piece − 1` and 2.
struct SequencedStreamWriter: Sendable {
    let pieceLength: Int
    private var pending: [UInt8] = []
    /// Bytes of `pending` already handed out (dropped lazily, when more bytes are appended).
    private var pendingStart = 0
    /// Stream offset (bytes appended in all) up to which the bytes go out even if short.
    private var flushEnd: Int?
    private(set) var bytesAppended = 0
    private(set) var bytesHandedOut = 0
    private(set) var valuesHandedOut = 0

    /// `overChannel`: values up to `channelValueLengths`.
    init(maximumValueLength: Int, overChannel: Bool = false) {
        pieceLength = SequencedStream.clampValueLength(maximumValueLength, overChannel: overChannel)
            - SequencedStream.sequenceLength
    }

    var pendingCount: Int { pending.count - pendingStart }
    var hasFlushPending: Bool { flushEnd != nil }

    mutating func append(_ bytes: [UInt8]) {
        if pendingStart > 0 {
            pending.removeFirst(pendingStart)
            pendingStart = 0
        }
        pending += bytes
        bytesAppended += bytes.count
    }

    /// The stream pauses after the bytes appended so far: they may go out as a short value.
    mutating func flush() {
        if bytesAppended > bytesHandedOut { flushEnd = bytesAppended }
    }

    /// The next value, or nil until more bytes or a flush arrive.
    mutating func nextValue() -> [UInt8]? {
        let length: Int
        if let flushEnd {
            let segment = flushEnd - bytesHandedOut
            if segment <= pieceLength {
                length = segment
            } else if segment == pieceLength + 1 {
                length = pieceLength - 1
            } else {
                length = pieceLength
            }
        } else if pendingCount >= pieceLength + 2 {
            length = pieceLength
        } else {
            return nil
        }
        let sequence = UInt16(truncatingIfNeeded: valuesHandedOut)
        var value: [UInt8] = [UInt8(sequence >> 8), UInt8(truncatingIfNeeded: sequence)]
        value.reserveCapacity(SequencedStream.sequenceLength + length)
        value += pending[pendingStart..<(pendingStart + length)]
        pendingStart += length
        bytesHandedOut += length
        valuesHandedOut += 1
        if bytesHandedOut == flushEnd { flushEnd = nil }
        return value
    }

    /// Every value until the last flush point (what a side sends before it waits).
    mutating func drain() -> [[UInt8]] {
        var values: [[UInt8]] = []
        while let value = nextValue() { values.append(value) }
        return values
    }
}

/// Puts sequence-numbered values back in order (several ATT bearers may reorder notifications and write commands). A
/// number is read as its distance from the next needed: `0..<reorderWindow` ahead is held, a recent one behind is a
/// replay, others are too far ahead. At most `reorderWindow − 1` values of ≤ 512 bytes are held (~128 KiB). Over an
/// L2CAP channel values may be 8 KiB and never reorder: nothing is held, one out of order is a broken stream.
struct SequencedStreamReader: Sendable {
    private var nextSequence: UInt16 = 0
    private var consumedCount = 0
    private var held: [UInt16: ArraySlice<UInt8>] = [:]
    private let maximumValueLength: Int
    private let reorderWindow: Int

    init(overChannel: Bool = false) {
        maximumValueLength = overChannel ? SequencedStream.channelValueLengths.upperBound
            : SequencedStream.valueLengths.upperBound
        reorderWindow = overChannel ? 1 : SequencedStream.reorderWindow
    }

    var heldCount: Int { held.count }

    /// The stream bytes that `value` makes available in order (none when it is held).
    mutating func accept(_ value: [UInt8]) throws(SecureSessionError) -> [ArraySlice<UInt8>] {
        guard value.count > SequencedStream.sequenceLength else {
            throw .streamFailed("value of \(value.count) bytes, too short to carry stream bytes")
        }
        guard value.count <= maximumValueLength else {
            throw .streamFailed("value of \(value.count) bytes, over the limit of \(maximumValueLength)")
        }
        let sequence = UInt16(value[0]) << 8 | UInt16(value[1])
        let piece = value[SequencedStream.sequenceLength...]
        let distance = Int(sequence &- nextSequence)
        if distance == 0 {
            var pieces = [piece]
            advance()
            while !held.isEmpty, let next = held.removeValue(forKey: nextSequence) {
                pieces.append(next)
                advance()
            }
            return pieces
        }
        if distance < reorderWindow {
            guard held[sequence] == nil else { throw .streamFailed("value \(sequence) received twice") }
            held[sequence] = piece
            return []
        }
        let behind = Int(nextSequence &- sequence)
        if behind <= min(consumedCount, 65536 - reorderWindow) {
            throw .streamFailed("value \(sequence) received twice")
        }
        throw .streamFailed("value \(sequence) too far ahead of \(nextSequence)")
    }

    private mutating func advance() {
        nextSequence &+= 1
        consumedCount += 1
    }
}
