/// The bound of one message on the air: `floor` plus its bytes at `minimumRate` — or, when each
/// value waits for a confirmation, `confirmedValueAllowance` per value if that is longer —
/// capped at a year (options are validated, but a deadline must never trap); none when the
/// rate is 0 (no floor).
package struct TransferDeadline: Sendable, Hashable {
    /// Bytes per second; 0: no bound.
    package var minimumRate: Int
    package var floor: Duration

    /// What a confirmed indication may take at least: one round trip is two connection events,
    /// 60–100 ms at BlueZ's default 30–50 ms interval; 20-byte values at `--min-rate`'s
    /// default would allow only 78 ms.
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
