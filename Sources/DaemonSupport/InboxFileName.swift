import Foundation

/// Names for messages the receiver daemon stores (pass the result as `baseName` to the output directory, which adds
/// `-1`, `-2`… when a name is taken). Received messages carry no file name, so the name says when it arrived: names
/// sort in arrival order, hold no `:` (safe on FAT and in scp/rsync arguments), end in `.txt` for text.
package enum InboxFileName {
    /// "message-20250131-120005.042-0007.txt": UTC arrival time with milliseconds, then the run's message sequence.
    package static func make(receivedAt: Date, sequence: Int, payload: some Collection<UInt8>) -> String {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let parts = calendar.dateComponents([.year, .month, .day, .hour, .minute, .second, .nanosecond], from: receivedAt)
        let milliseconds = min(999, (parts.nanosecond ?? 0) / 1_000_000)
        let stamp = pad(parts.year ?? 0, 4) + pad(parts.month ?? 0, 2) + pad(parts.day ?? 0, 2) + "-"
            + pad(parts.hour ?? 0, 2) + pad(parts.minute ?? 0, 2) + pad(parts.second ?? 0, 2) + "." + pad(milliseconds, 3)
        let fileExtension = looksLikeText(payload) ? "txt" : "bin"
        return "message-\(stamp)-\(pad(max(0, sequence), 4)).\(fileExtension)"
    }

    /// Valid UTF-8 without control characters other than tab, line feed, carriage return and form feed.
    package static func looksLikeText(_ payload: some Collection<UInt8>) -> Bool {
        guard !payload.isEmpty else { return false }
        var iterator = payload.makeIterator()
        var decoder = UTF8()
        while true {
            switch decoder.decode(&iterator) {
            case .scalarValue(let scalar):
                let value = scalar.value
                if value < 0x20 && value != 0x09 && value != 0x0A && value != 0x0D && value != 0x0C { return false }
                if value == 0x7F { return false }
            case .emptyInput: return true
            case .error: return false
            }
        }
    }

    private static func pad(_ number: Int, _ width: Int) -> String {
        let digits = String(number)
        return digits.count >= width ? digits : String(repeating: "0", count: width - digits.count) + digits
    }
}
