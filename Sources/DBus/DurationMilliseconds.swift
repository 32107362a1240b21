extension Duration {
    /// Whole milliseconds, rounded up (libdbus and poll(2) count them; down would wake before the deadline). The caller
    /// bounds the duration so the product cannot overflow.
    var millisecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}
