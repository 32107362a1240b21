extension Duration {
    /// The duration in seconds, as a Double: for rates, estimates and what is shown to people.
    /// Deadlines and timers keep the exact `Duration`.
    public var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
