/// Puts framed values back in sequence order.
///
/// BlueZ with several ATT bearers (EATT, `[GATT] Channels` > 1) lets notifications of one
/// characteristic overtake each other. Every framed value carries a 16-bit sequence number that
/// wraps every 65536 values, so a number is read as its distance from the next one needed:
/// `0..<reorderWindow` ahead is accepted (the next one is consumed at once, later ones are held),
/// a number just behind (already consumed) is a duplicate, anything else is too far ahead.
/// At most `reorderWindow − 1` pieces are ever held.
struct ReorderBuffer: Sendable {
    static let window = WireFormat.reorderWindow

    /// The sequence number of the next piece of the stream.
    private(set) var nextSequence: UInt16 = 0
    /// Pieces consumed in order so far.
    private(set) var consumedCount = 0
    private var held: [UInt16: ArraySlice<UInt8>] = [:]
    /// Bytes of the pieces held out of order.
    private(set) var heldByteCount = 0

    var heldCount: Int { held.count }

    /// Where a value with `sequence` belongs.
    enum Placement {
        /// It is the next piece: consume it, then call ``advance()``.
        case next
        /// It belongs further ahead: ``hold(_:sequence:)`` it.
        case ahead
    }

    func place(_ sequence: UInt16) throws(ReceiveError) -> Placement {
        let distance = Int(sequence &- nextSequence)
        if distance == 0 { return .next }
        if distance < Self.window {
            if held[sequence] != nil { throw .duplicateValue(sequence: sequence) }
            return .ahead
        }
        // Behind the next one needed: consumed already, if it is among the recent ones.
        let behind = Int(nextSequence &- sequence)
        if behind <= min(consumedCount, 65536 - Self.window) { throw .duplicateValue(sequence: sequence) }
        throw .reorderWindowExceeded(sequence: sequence, expected: nextSequence)
    }

    mutating func hold(_ piece: ArraySlice<UInt8>, sequence: UInt16) {
        held[sequence] = piece
        heldByteCount += piece.count
    }

    mutating func advance() {
        nextSequence &+= 1
        consumedCount += 1
    }

    /// The held piece that is next in order, if it arrived; moves past it.
    mutating func takeNext() -> ArraySlice<UInt8>? {
        guard !held.isEmpty, let piece = held.removeValue(forKey: nextSequence) else { return nil }
        heldByteCount -= piece.count
        advance()
        return piece
    }

    mutating func removeAll() {
        held = [:]
        heldByteCount = 0
    }
}
