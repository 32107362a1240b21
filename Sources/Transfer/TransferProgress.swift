/// How far a transfer is, in payload bytes.
package struct TransferProgress: Sendable, Hashable {
    package var bytesSoFar: Int
    /// Known for framed messages and on the sending side, nil for a compat receiver.
    package var totalBytes: Int?

    package init(bytesSoFar: Int, totalBytes: Int?) {
        self.bytesSoFar = bytesSoFar
        self.totalBytes = totalBytes
    }

    /// 0...1 when the total is known; an empty message is complete (1).
    package var fraction: Double? {
        guard let totalBytes else { return nil }
        guard totalBytes > 0 else { return 1 }
        return min(1, max(0, Double(bytesSoFar) / Double(totalBytes)))
    }

    package var remainingBytes: Int? {
        totalBytes.map { max(0, $0 - bytesSoFar) }
    }
}
