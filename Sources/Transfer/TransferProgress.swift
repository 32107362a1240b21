/// How far a transfer is, in payload bytes.
package struct TransferProgress: Sendable, Hashable {
    package var bytesSoFar: Int
    /// Known for framed messages and on the sending side, nil for a compat receiver.
    package var totalBytes: Int?

    package init(bytesSoFar: Int, totalBytes: Int?) {
        self.bytesSoFar = bytesSoFar
        self.totalBytes = totalBytes
    }

    package var remainingBytes: Int? {
        totalBytes.map { max(0, $0 - bytesSoFar) }
    }
}
