extension Duration {
    /// The duration in seconds, as a Double: for rates, estimates and what is shown to people.
    /// Deadlines and timers keep the exact `Duration`.
    package var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}

extension Duration {
    /// `seconds`, to the nearest millisecond: what options and estimates in seconds become.
    /// The caller bounds `seconds` (finite, far below 9e15) so that the product cannot trap.
    package static func milliseconds(roundingSeconds seconds: Double) -> Duration {
        .milliseconds(Int64((seconds * 1000).rounded()))
    }
}
