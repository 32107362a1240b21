/// Bounds that keep a receiver's memory independent of what a peer sends.
public struct TransferLimits: Sendable, Hashable {
    /// Largest payload accepted, in bytes. A framed header announcing more is refused before any
    /// payload byte is stored; a compat stream is refused as soon as it grows past this.
    public var maximumMessageSize: Int

    /// Negative sizes are treated as 0.
    public init(maximumMessageSize: Int) {
        self.maximumMessageSize = max(0, maximumMessageSize)
    }

    /// 64 MiB: far more than BLE moves in reasonable time (tens of minutes even on a fast
    /// link), yet small enough to hold in memory on any host, twice (sender and digest pass).
    public static let `default` = TransferLimits(maximumMessageSize: 64 * 1024 * 1024)
}
