/// What holds a live link back from the best both hosts allow, from what it runs at and what this host's tuning did.
package enum LinkJudgement {
    /// The settings not at their best, each with what limits it: a refusal tuning met on this host (privilege,
    /// controller), else the peer (its host or controller chose less).
    package static func limits(of link: LinkParameters, tuning: AdapterTuningOutcome?,
                               target: AdapterLinkTarget = .tuned) -> [LinkRefusal] {
        var limits: [LinkRefusal] = []
        func refusal(_ setting: String) -> LinkRefusal? {
            tuning?.refusals.first { $0.setting.contains(setting) }
        }
        if let phy = link.transmitPHY, phy != .le2M, target.twoM {
            limits.append(refusal("2M") ?? (tuning == nil
                ? LinkRefusal(setting: "2M PHY", limit: .configuration, detail: "tuning is off (--no-tune)")
                : LinkRefusal(setting: "2M PHY", limit: .peer, detail: "the peer stays on \(phy)")))
        }
        if let interval = link.intervalUnits, interval > target.connectionInterval.upperBound {
            let text = "\(AdapterTuning.milliseconds(interval)) ms interval"
            if let local = refusal("interval") {
                limits.append(LinkRefusal(setting: text, limit: local.limit, detail: local.detail))
            } else if tuning == nil {
                limits.append(LinkRefusal(setting: text, limit: .configuration, detail: "tuning is off (--no-tune)"))
            } else {
                limits.append(LinkRefusal(setting: text, limit: .peer,
                                          detail: "the peer or its controller did not take "
                                              + "\(AdapterTuning.milliseconds(target.connectionInterval.lowerBound))–"
                                              + "\(AdapterTuning.milliseconds(target.connectionInterval.upperBound)) ms"))
            }
        }
        if let octets = link.transmitOctets, octets < 251 {
            limits.append(LinkRefusal(setting: "\(octets) B packets", limit: .peer,
                                      detail: "a controller of the link takes no longer packets"))
        }
        return limits
    }
}

/// One step back from a tuned link that carries far less than it did (loss climbing at the edge of range): the PHY to
/// 1M, the interval to the kernel's 30–50 ms. Pure: fed the bytes moved over time, it says once when to step back.
package struct LinkFallback: Sendable {
    package static let window: Duration = .seconds(10)  // over which a rate is taken
    /// Stepping back when the last window's rate falls under this share of the best window's (after a whole window).
    package static let fraction = 1.0 / 3.0

    private var samples: [(at: Duration, bytes: Int)] = []
    private var best: Double = 0
    package private(set) var steppedBack = false

    package init() {}

    /// Bytes moved so far at `at` (since any fixed origin) during a transfer; the two rates (now, best) when it is time
    /// to step back, once.
    package mutating func record(bytes: Int, at: Duration) -> (now: Double, best: Double)? {
        guard !steppedBack else { return nil }
        samples.append((at, bytes))
        while let first = samples.first, at - first.at > Self.window * 2 { samples.removeFirst() }
        guard let start = samples.last(where: { at - $0.at >= Self.window }) else { return nil }
        let seconds = Double((at - start.at).components.seconds) + Double((at - start.at).components.attoseconds) / 1e18
        guard seconds > 0 else { return nil }
        let rate = Double(bytes - start.bytes) / seconds
        best = max(best, rate)
        guard best > 0, rate < best * Self.fraction else { return nil }
        steppedBack = true
        return (rate, best)
    }

    /// A new transfer: the rates of the last one do not compare (the best stays).
    package mutating func transferStarted() { samples.removeAll() }
}
