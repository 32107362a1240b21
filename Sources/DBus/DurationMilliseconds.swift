extension Duration {
    /// Whole milliseconds, rounded up: libdbus timeouts and poll(2) count milliseconds, and
    /// rounding down would wake before the deadline. The caller bounds the duration so that
    /// the product cannot overflow.
    var millisecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}
