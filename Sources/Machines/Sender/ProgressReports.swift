import Transfer

/// When the sender reports a message's progress: first value, then at most once per `interval`,
/// and on its last byte. Times are durations since the message started.
package struct ProgressReports: Sendable {
    package private(set) var meter: ProgressMeter
    private let totalBytes: Int
    private let interval: Duration
    private var lastReport: (at: Duration, bytes: Int)?

    package init(totalBytes: Int, interval: Duration) {
        meter = ProgressMeter(totalBytes: totalBytes)
        self.totalBytes = totalBytes
        self.interval = interval
    }

    /// Records `bytesSent` handed over at `elapsed`; true when that is to be reported.
    package mutating func record(bytesSent: Int, at elapsed: Duration) -> Bool {
        meter.record(bytesSoFar: bytesSent, at: elapsed)
        let due = lastReport.map { elapsed - $0.at >= interval } ?? true
        let isLast = bytesSent == totalBytes && lastReport?.bytes != bytesSent
        guard due || isLast else { return false }
        lastReport = (elapsed, bytesSent)
        return true
    }
}
