@testable import Machines
import Testing

/// When the sender reports progress: the first value, then once per interval, and the last byte.
@Suite struct ProgressReportsTests {
    /// Which of `steps` (bytes handed over, time since the message started) are reported.
    static func reported(_ steps: [(bytes: Int, at: Duration)], totalBytes: Int = 1000,
                         interval: Duration = .seconds(1)) -> [Bool] {
        var reports = ProgressReports(totalBytes: totalBytes, interval: interval)
        return steps.map { reports.record(bytesSent: $0.bytes, at: $0.at) }
    }

    @Test("the first value is reported, then at most once per interval")
    func throttled() {
        let steps: [(bytes: Int, at: Duration)] = [(100, .milliseconds(10)), (200, .milliseconds(500)),
                                                   (300, .milliseconds(1009)), (400, .milliseconds(1010)),
                                                   (500, .milliseconds(1500))]
        #expect(Self.reported(steps) == [true, false, false, true, false])
    }

    @Test("the last byte is reported at once, and not again within the interval")
    func lastByte() {
        let steps: [(bytes: Int, at: Duration)] = [(900, .zero), (1000, .milliseconds(100)),
                                                   (1000, .milliseconds(200)), (1000, .seconds(2))]
        #expect(Self.reported(steps) == [true, true, false, true])
    }

    @Test("the meter follows every value, reported or not")
    func meter() {
        var reports = ProgressReports(totalBytes: 1000, interval: .seconds(10))
        _ = reports.record(bytesSent: 100, at: .zero)
        _ = reports.record(bytesSent: 500, at: .seconds(1))
        #expect(reports.meter.progress.bytesSoFar == 500)
    }
}
