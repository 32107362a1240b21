import Testing
import Transfer

@Suite struct ProgressMeterTests {
    @Test func fractionAndRemaining() {
        #expect(TransferProgress(bytesSoFar: 25, totalBytes: 100).fraction == 0.25)
        #expect(TransferProgress(bytesSoFar: 25, totalBytes: 100).remainingBytes == 75)
        #expect(TransferProgress(bytesSoFar: 0, totalBytes: 0).fraction == 1)
        #expect(TransferProgress(bytesSoFar: 10, totalBytes: nil).fraction == nil)
        #expect(TransferProgress(bytesSoFar: 200, totalBytes: 100).fraction == 1)
    }

    @Test func rateAndETAAtASteadyRate() {
        var meter = ProgressMeter(totalBytes: 10_000)
        #expect(meter.bytesPerSecond == nil)
        #expect(meter.estimatedRemaining == nil)
        for second in 0...4 {
            meter.record(bytesSoFar: second * 1000, at: .seconds(second))
        }
        #expect(meter.bytesPerSecond == 1000)
        #expect(meter.estimatedRemaining == .seconds(6))
        #expect(meter.progress == TransferProgress(bytesSoFar: 4000, totalBytes: 10_000))
    }

    @Test func rateFollowsTheRecentWindow() {
        var meter = ProgressMeter(totalBytes: nil, window: .seconds(2))
        for tenth in 0...100 {  // 100 B/s for 10 s
            meter.record(bytesSoFar: tenth * 10, at: .milliseconds(tenth * 100))
        }
        for tenth in 1...40 {  // then 1000 B/s for 4 s
            meter.record(bytesSoFar: 1000 + tenth * 100, at: .milliseconds(10_000 + tenth * 100))
        }
        let rate = meter.bytesPerSecond ?? 0
        #expect(rate > 900 && rate <= 1000)
        #expect(meter.estimatedRemaining == nil)  // total unknown
    }

    @Test func stalledTransferHasNoETA() {
        var meter = ProgressMeter(totalBytes: 100)
        meter.record(bytesSoFar: 10, at: .seconds(0))
        meter.record(bytesSoFar: 10, at: .seconds(3))
        #expect(meter.bytesPerSecond == 0)
        #expect(meter.estimatedRemaining == nil)
    }

    @Test func completeTransferHasZeroETA() {
        var meter = ProgressMeter(totalBytes: 100)
        meter.record(bytesSoFar: 100, at: .seconds(1))
        #expect(meter.estimatedRemaining == .zero)
    }

    @Test func timeGoingBackwardsIsIgnoredAndARestartStartsOver() {
        var meter = ProgressMeter(totalBytes: 1000)
        meter.record(bytesSoFar: 0, at: .seconds(0))
        meter.record(bytesSoFar: 500, at: .seconds(5))
        meter.record(bytesSoFar: 900, at: .seconds(1))
        #expect(meter.bytesSoFar == 500)
        meter.record(bytesSoFar: 0, at: .seconds(6))  // new subscription: from byte 0 again
        meter.record(bytesSoFar: 200, at: .seconds(7))
        #expect(meter.bytesPerSecond == 200)
        #expect(meter.estimatedRemaining == .seconds(4))
    }
}

extension TransferProgress {
    /// 0...1 when the total is known; an empty message is complete (1).
    var fraction: Double? {
        guard let totalBytes else { return nil }
        guard totalBytes > 0 else { return 1 }
        return min(1, max(0, Double(bytesSoFar) / Double(totalBytes)))
    }
}
