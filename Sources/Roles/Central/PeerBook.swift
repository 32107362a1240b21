/// The central's memory of peripherals across visits: which failed lately and when each may
/// be tried again, so a peer that keeps failing does not monopolise the central while others
/// wait. Times are durations since the run started (no clock inside, for tests).
struct PeerBook: Sendable {
    struct Record: Sendable, Equatable {
        var consecutiveFailures = 0
        var notBefore: Duration = .zero
        var messagesReceived = 0
    }

    let backoff: BackoffPolicy
    /// RSSI floor in dBm; nil accepts any.
    let minimumRSSI: Int?
    private(set) var records: [String: Record] = [:]

    init(backoff: BackoffPolicy, minimumRSSI: Int?) {
        self.backoff = backoff
        self.minimumRSSI = minimumRSSI
    }

    /// Whether a sighting of `address` with signal `rssi` is worth a connection attempt at
    /// `now`. With a floor, a sighting without an RSSI reading (a device BlueZ merely
    /// remembers) waits for a fresh advertisement.
    func accepts(address: String, rssi: Int?, at now: Duration) -> Bool {
        if let minimumRSSI {
            guard let rssi, rssi >= minimumRSSI else { return false }
        }
        return isEligible(address, at: now)
    }

    func isEligible(_ address: String, at now: Duration) -> Bool {
        guard let record = records[Self.key(address)] else { return true }
        return now >= record.notBefore
    }

    /// Records a failed visit and returns how long `address` now waits.
    @discardableResult
    mutating func recordFailure(_ address: String, at now: Duration, severe: Bool = false) -> Duration {
        var record = records[Self.key(address)] ?? Record()
        record.consecutiveFailures += severe ? 4 : 1
        let delay = backoff.delay(afterFailures: record.consecutiveFailures)
        record.notBefore = now + delay
        records[Self.key(address)] = record
        return delay
    }

    /// Records a message received from `address`: it may be visited again at once (a sender
    /// with several messages waits for the next subscription).
    mutating func recordSuccess(_ address: String) {
        var record = records[Self.key(address)] ?? Record()
        record.consecutiveFailures = 0
        record.notBefore = .zero
        record.messagesReceived += 1
        records[Self.key(address)] = record
    }

    /// The earliest moment after `now` when a peer now backing off becomes eligible.
    func nextEligibility(after now: Duration) -> Duration? {
        records.values.map(\.notBefore).filter { $0 > now }.min()
    }

    static func key(_ address: String) -> String { address.uppercased() }
}
