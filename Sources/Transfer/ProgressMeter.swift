/// Transfer rate and time remaining from the caller's (bytes, time) samples (no clock inside),
/// over a sliding window (default 5 s) to follow a changing link, with a bounded number of samples.
package struct ProgressMeter: Sendable {
    private struct Sample: Sendable {
        var bytes: Int
        var seconds: Double
    }

    package let totalBytes: Int?
    package let window: Duration
    private var samples: [Sample] = []
    private var latest: Sample?
    /// Samples closer together than this are merged, bounding `samples` to about 64 entries.
    private var spacing: Double { window.seconds / 64 }

    package init(totalBytes: Int?, window: Duration = .seconds(5)) {
        self.totalBytes = totalBytes
        self.window = window > .zero ? window : .seconds(5)
    }

    /// `bytesSoFar` bytes at `time` after the start. Samples back in time are ignored; fewer bytes
    /// than before (a restart) start the measurement afresh.
    package mutating func record(bytesSoFar: Int, at time: Duration) {
        let sample = Sample(bytes: bytesSoFar, seconds: time.seconds)
        if let latest {
            if sample.seconds < latest.seconds { return }
            if sample.bytes < latest.bytes { samples.removeAll() }
        }
        if let last = samples.last, sample.seconds - last.seconds < spacing, samples.count > 1 {
            // Close to the previous stored sample: only move the latest point.
        } else {
            samples.append(sample)
        }
        latest = sample
        let horizon = sample.seconds - window.seconds
        // Keep one sample at or before the horizon so the window is always spanned.
        while samples.count > 2, samples[1].seconds <= horizon { samples.removeFirst() }
    }

    package var bytesSoFar: Int { latest?.bytes ?? 0 }

    package var progress: TransferProgress {
        TransferProgress(bytesSoFar: bytesSoFar, totalBytes: totalBytes)
    }

    /// Bytes per second over the window; nil until two samples some time apart exist.
    package var bytesPerSecond: Double? {
        guard let first = samples.first, let latest, latest.seconds > first.seconds else { return nil }
        return Double(latest.bytes - first.bytes) / (latest.seconds - first.seconds)
    }

    /// Time left at the current rate; nil when the total or the rate is unknown or the rate is 0.
    package var estimatedRemaining: Duration? {
        guard let remaining = progress.remainingBytes else { return nil }
        if remaining == 0 { return .zero }
        guard let rate = bytesPerSecond, rate > 0 else { return nil }
        let secondsLeft = Double(remaining) / rate
        guard secondsLeft.isFinite, secondsLeft < 1e12 else { return nil }
        return .milliseconds(roundingSeconds: secondsLeft)
    }
}
