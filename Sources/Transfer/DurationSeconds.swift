extension Duration {
    /// In seconds, for rates, estimates and people; deadlines and timers keep the exact `Duration`.
    package var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

    /// `seconds` to the nearest millisecond; the caller bounds it (finite, far below 9e15) so this cannot trap.
    package static func milliseconds(roundingSeconds seconds: Double) -> Duration {
        .milliseconds(Int64((seconds * 1000).rounded()))
    }
}
