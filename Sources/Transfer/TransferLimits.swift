/// Bounds that keep a receiver's memory independent of what a peer sends.
package struct TransferLimits: Sendable, Hashable {
    /// Largest payload taken into memory: a HEADER announcing more is refused before any payload
    /// byte; a compat stream as soon as it grows past it.
    package var maximumMessageSize: Int
    /// Largest framed payload taken into a partial file; nil: no bound but the room beside `--reserve`.
    package var maximumStoredMessageSize: Int?

    /// One bound for both (`--max-size`). Negative sizes are treated as 0.
    package init(maximumMessageSize: Int) {
        self.init(maximumMessageSize: maximumMessageSize, maximumStoredMessageSize: maximumMessageSize)
    }

    package init(maximumMessageSize: Int, maximumStoredMessageSize: Int?) {
        self.maximumMessageSize = max(0, maximumMessageSize)
        self.maximumStoredMessageSize = maximumStoredMessageSize.map { max(0, $0) }
    }

    /// The largest framed payload taken: into a partial file when `onDisk`, else into memory.
    package func maximumPayload(onDisk: Bool) -> Int {
        onDisk ? (maximumStoredMessageSize ?? Int.max) : maximumMessageSize
    }

    /// 64 MiB in memory: far more than BLE moves in tens of minutes, yet small enough for any host.
    /// On disk no bound but the disk's: a file streams in constant memory.
    package static let `default` = TransferLimits(maximumMessageSize: 64 * 1024 * 1024, maximumStoredMessageSize: nil)
}
