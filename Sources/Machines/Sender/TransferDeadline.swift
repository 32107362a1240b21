/// One message's bound: `floor` plus its bytes at `minimumRate` (or `confirmedValueAllowance` per
/// confirmed value if longer), capped at a year (a deadline must never trap); none at rate 0.
package struct TransferDeadline: Sendable, Hashable {
    /// Bytes per second; 0: no bound.
    package var minimumRate: Int
    package var floor: Duration

    /// A confirmed indication's minimum: a round trip is two connection events, 60–100 ms at
    /// BlueZ's default interval; 20-byte values at `--min-rate`'s default would allow 78 ms.
    package static let confirmedValueAllowance: Duration = .milliseconds(250)

    package init(minimumRate: Int, floor: Duration) {
        self.minimumRate = minimumRate
        self.floor = floor
    }

    package func limit(forWireBytes wireBytes: Int, confirmedValues: Int = 0) -> Duration? {
        guard minimumRate > 0 else { return nil }
        let seconds = max(Double(max(wireBytes, 0)) / Double(minimumRate),
                          Double(max(confirmedValues, 0)) * Self.confirmedValueAllowance.seconds)
        let year = 365.0 * 24 * 3600
        return floor + .milliseconds(Int64(min(seconds, year) * 1000))
    }

    /// Why a central that missed the bound of a `byteCount`-byte message is dropped.
    package func reason(byteCount: Int, limit: Duration, confirmed: Bool) -> String {
        let pace = confirmed
            ? "at least \(minimumRate) bytes/s or a confirmed value every \(Self.confirmedValueAllowance.seconds) s"
            : "at least \(minimumRate) bytes/s"
        return "it did not take the \(byteCount)-byte message within \(SubscriptionDelivery.describe(limit)) (\(pace), --min-rate)"
    }
}
