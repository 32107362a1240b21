
/// A value with a unit that cannot be read: one line saying what was typed and what is taken.
/// ArgumentParser puts it after "the value 'X' is invalid for '--option <UNIT>': ".
struct UnitParseError: Error, Equatable, CustomStringConvertible {
    let description: String
}

/// Byte counts as options take them: a whole number of bytes, or a number with a binary multiple, whole or not, as
/// rsync takes them: `1048576`, `64K`, `64KiB`, `1.5M`, `64MiB`, `1G`, `1GiB` (K = 1024 bytes, M = 1024 K, G = 1024
/// M; the letter may be lowercase, a trailing `B` is allowed: `64MB` = `64MiB`). A fraction of a multiple is rounded
/// down to whole bytes; plain bytes are whole.
enum ByteCountArgument {
    static let multiples: [(suffixes: [String], factor: Int)] = [
        (["", "b"], 1),
        (["k", "kb", "kib"], 1 << 10),
        (["m", "mb", "mib"], 1 << 20),
        (["g", "gb", "gib"], 1 << 30),
        (["t", "tb", "tib"], 1 << 40),
    ]

    /// What help texts say about the format, once.
    static let formatHint = "64K, 1.5M, 1G: binary multiples (1K = 1024)"

    static func parse(_ text: String) throws(UnitParseError) -> Int {
        let trimmed = text.trimmingSpaces
        if trimmed.hasPrefix("-") { throw UnitParseError(description: "a size must be positive, not '\(trimmed)'") }
        let number = trimmed.prefix(while: { $0.isASCII && ($0.isNumber || $0 == ".") })
        let suffix = trimmed.dropFirst(number.count).lowercased()
        guard number.contains(where: \.isNumber), number.filter({ $0 == "." }).count <= 1 else {
            throw UnitParseError(description: "give a number of bytes, optionally with K, M or G (\(formatHint))")
        }
        guard let factor = multiples.first(where: { $0.suffixes.contains(suffix) })?.factor else {
            throw UnitParseError(description: "unknown unit '\(trimmed.dropFirst(number.count))'; use K, M or G (\(formatHint))")
        }
        if number.contains(".") {
            guard factor > 1 else {
                throw UnitParseError(description: "give a whole number of bytes, or a fraction of K, M or G (\(formatHint))")
            }
            guard let value = Double(number), value.isFinite, value * Double(factor) < 9.0e18 else {
                throw UnitParseError(description: "'\(trimmed)' is too large")
            }
            return Int((value * Double(factor)).rounded(.down))
        }
        guard let whole = Int(number) else { throw UnitParseError(description: "'\(trimmed)' is too large") }
        let (bytes, overflow) = whole.multipliedReportingOverflow(by: factor)
        guard !overflow else { throw UnitParseError(description: "'\(trimmed)' is too large") }
        return bytes
    }
}

/// Durations as options take them: seconds as a plain number (`30`, `1.5`), or numbers with units, several in a row
/// as systemd takes them: `250ms`, `30s`, `5m`, `1m30s`, `1h 30m`, `1d`. Returned in seconds.
enum DurationArgument {
    static let units: [(suffixes: [String], seconds: Double)] = [
        (["ms", "msec"], 0.001), (["s", "sec", "secs", "second", "seconds"], 1),
        (["m", "min", "mins", "minute", "minutes"], 60), (["h", "hr", "hour", "hours"], 3600),
        (["d", "day", "days"], 86400), (["w", "week", "weeks"], 604_800),
    ]

    static let formatHint = "such as 30, 30s, 5m, 1m30s, 1h or 250ms (a plain number is seconds)"

    static func parse(_ text: String) throws(UnitParseError) -> Double {
        let trimmed = String(text.trimmingSpaces.lowercased())
        if trimmed.hasPrefix("-") { throw UnitParseError(description: "a duration must be positive, not '\(trimmed)'") }
        if let seconds = Double(trimmed), trimmed.allSatisfy({ $0.isNumber || $0 == "." }) {
            guard seconds.isFinite else { throw UnitParseError(description: "give a duration \(formatHint)") }
            return seconds
        }
        var rest = Substring(trimmed)
        var total = 0.0
        var parts = 0
        while !rest.isEmpty {
            rest = rest.drop(while: { $0 == " " })
            let number = rest.prefix(while: { $0.isASCII && ($0.isNumber || $0 == ".") })
            rest = rest.dropFirst(number.count).drop(while: { $0 == " " })
            let unit = rest.prefix(while: { $0.isLetter })
            rest = rest.dropFirst(unit.count)
            guard let value = Double(number), value.isFinite else {
                throw UnitParseError(description: "give a duration \(formatHint)")
            }
            guard let scale = units.first(where: { $0.suffixes.contains(String(unit)) })?.seconds else {
                throw UnitParseError(description: unit.isEmpty
                    ? "give a unit after each number but a lone one: \(formatHint)"
                    : "unknown unit '\(unit)'; use ms, s, m, h or d, several in a row as in 1m30s")
            }
            total += value * scale
            parts += 1
            rest = rest.drop(while: { $0 == " " })
        }
        guard parts > 0, total.isFinite else { throw UnitParseError(description: "give a duration \(formatHint)") }
        return total
    }
}

extension String {
    fileprivate var trimmingSpaces: Substring {
        let start = firstIndex(where: { !$0.isWhitespace }) ?? endIndex
        let end = lastIndex(where: { !$0.isWhitespace }).map { index(after: $0) } ?? start
        return self[start..<end]
    }
}

/// `transform:` closures for `@Option`: ArgumentParser reports what they throw after the option.
func bytes(_ text: String) throws -> Int { try ByteCountArgument.parse(text) }
func seconds(_ text: String) throws -> Double { try DurationArgument.parse(text) }
