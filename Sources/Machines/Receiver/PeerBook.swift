/// The central's memory of peripherals across visits: which failed lately and when each may be
/// tried again, so a failing peer does not monopolise the central. Times are durations since the
/// run started (no clock inside). Bounded and fair against hostile neighbours:
/// - At most `capacity` records (rotating addresses make one each): the oldest go first, those
///   not backing off before those that are (evicting a back-off would let its peer straight in).
/// - ``choose(_:at:)`` alternates between peers that delivered before ("proven") and the others,
///   and in each class takes the least recently visited (never visited: seen first): neither
///   fresh random addresses nor a proven sender with endless tiny messages take every visit.
package struct PeerBook: Sendable {
    package struct Record: Sendable, Equatable {
        var consecutiveFailures = 0
        var notBefore: Duration = .zero
        var messagesReceived = 0
        /// When this address was first offered to ``choose(_:at:)``.
        var firstSeen: Duration = .zero
        var lastVisit: Duration?
    }

    /// Default bound of ``records``.
    package static let defaultCapacity = 1024

    package let backoff: BackoffPolicy
    /// RSSI floor in dBm; nil accepts any.
    package let minimumRSSI: Int?
    package let capacity: Int
    package private(set) var records: [String: Record] = [:]
    /// Whether the last visit went to a proven peer; the next prefers the other class.
    private var lastVisitWasProven = false

    package init(backoff: BackoffPolicy, minimumRSSI: Int?, capacity: Int = PeerBook.defaultCapacity) {
        self.backoff = backoff
        self.minimumRSSI = minimumRSSI
        self.capacity = max(1, capacity)
    }

    /// A sighting is worth a connection attempt at `now`. With a floor, one without an RSSI (a
    /// device BlueZ merely remembers) waits for a fresh advertisement.
    package func accepts(address: String, rssi: Int?, at now: Duration) -> Bool {
        if let minimumRSSI {
            guard let rssi, rssi >= minimumRSSI else { return false }
        }
        return isEligible(address, at: now)
    }

    package func isEligible(_ address: String, at now: Duration) -> Bool {
        guard let record = records[Self.key(address)] else { return true }
        return now >= record.notBefore
    }

    package struct Candidate: Sendable, Equatable {
        package var address: String
        package var rssi: Int?

        package init(address: String, rssi: Int?) {
            self.address = address
            self.rssi = rssi
        }
    }

    /// Picks which of `candidates` to visit at `now` (nil: none eligible), records the visit; new addresses seen now.
    package mutating func choose(_ candidates: [Candidate], at now: Duration) -> Int? {
        var eligible: [(index: Int, record: Record)] = []
        for (index, candidate) in candidates.enumerated() where accepts(address: candidate.address, rssi: candidate.rssi, at: now) {
            let key = Self.key(candidate.address)
            if records[key] == nil { insert(Record(firstSeen: now), for: key, at: now) }
            if let record = records[key], !eligible.contains(where: { Self.key(candidates[$0.index].address) == key }) {
                eligible.append((index, record))
            }
        }
        guard !eligible.isEmpty else { return nil }
        let proven = eligible.filter { $0.record.messagesReceived > 0 }
        let unproven = eligible.filter { $0.record.messagesReceived == 0 }
        let preferred = lastVisitWasProven ? (unproven.isEmpty ? proven : unproven) : (proven.isEmpty ? unproven : proven)
        // Least recently visited first; never visited ones by when they were first seen.
        let pick = preferred.min { a, b in
            switch (a.record.lastVisit, b.record.lastVisit) {
            case (nil, nil): a.record.firstSeen < b.record.firstSeen
            case (nil, _): true
            case (_, nil): false
            case (let x?, let y?): x < y
            }
        }!
        let key = Self.key(candidates[pick.index].address)
        records[key]?.lastVisit = now
        lastVisitWasProven = pick.record.messagesReceived > 0
        return pick.index
    }

    /// Records a failed visit and returns how long `address` now waits.
    @discardableResult
    package mutating func recordFailure(_ address: String, at now: Duration, severe: Bool = false) -> Duration {
        let key = Self.key(address)
        var record = records[key] ?? Record(firstSeen: now)
        record.consecutiveFailures += severe ? 4 : 1
        let delay = backoff.delay(afterFailures: record.consecutiveFailures)
        record.notBefore = now + delay
        insert(record, for: key, at: now)
        return delay
    }

    /// A message came from `address`: it may be visited again at once (``choose(_:at:)`` still lets others in).
    package mutating func recordSuccess(_ address: String, at now: Duration = .zero) {
        let key = Self.key(address)
        var record = records[key] ?? Record(firstSeen: now)
        record.consecutiveFailures = 0
        record.notBefore = .zero
        record.messagesReceived += 1
        insert(record, for: key, at: now)
    }

    /// Stores `record`; if full, evicts the idlest record not backing off, else the one whose back-off ends first.
    private mutating func insert(_ record: Record, for key: String, at now: Duration) {
        if records[key] == nil, records.count >= capacity {
            func activity(_ record: Record) -> Duration { record.lastVisit ?? record.firstSeen }
            let idle = records.filter { $0.value.notBefore <= now }
            let victim = idle.isEmpty
                ? records.min { $0.value.notBefore < $1.value.notBefore }?.key
                : idle.min { activity($0.value) < activity($1.value) }?.key
            if let victim { records.removeValue(forKey: victim) }
        }
        records[key] = record
    }

    package static func key(_ address: String) -> String { address.uppercased() }
}

/// Exponential back-off: `initial`, doubled per consecutive failure, capped at `maximum`.
package struct BackoffPolicy: Sendable, Hashable {
    package var initial: Duration
    package var maximum: Duration

    package init(initial: Duration = .milliseconds(500), maximum: Duration = .seconds(30)) {
        self.initial = initial
        self.maximum = max(initial, maximum)
    }

    /// The pause after `failures` consecutive failures (1 for the first); zero for none.
    package func delay(afterFailures failures: Int) -> Duration {
        guard failures > 0 else { return .zero }
        var delay = initial
        for _ in 1..<min(failures, 32) {
            delay = delay * 2
            if delay >= maximum { return maximum }
        }
        return min(delay, maximum)
    }
}
