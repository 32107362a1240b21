import Foundation

/// The `time` field of JSON events: ISO 8601 in UTC, to the millisecond (`2026-11-25T03:55:00.123Z`).
///
/// Formatted with Foundation's `ISO8601FormatStyle`, a value type that needs no ICU: an `ISO8601DateFormatter` built
/// per event set up an ICU calendar and date format each time, and a receiver printing `--json` progress spent about
/// a sixth of its CPU on that.
enum EventTimestamp {
    private static let style = Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt)

    static func string(for date: Date = Date()) -> String { style.format(date) }
}
