import ArgumentParser

/// A value with a unit that cannot be read: one line saying what was typed and what is taken.
/// ArgumentParser puts it after "the value 'X' is invalid for '--option <UNIT>': ".
struct UnitParseError: Error, Equatable, CustomStringConvertible {
    let description: String
}

/// Byte counts as options take them: a whole number of bytes, or one with a binary multiple:
/// `1048576`, `64K`, `64KiB`, `64M`, `64MiB`, `1G`, `1GiB` (K = 1024 bytes, M = 1024 K,
/// G = 1024 M; the letter may be lowercase, a trailing `B` is allowed: `64MB` = `64MiB`).
enum ByteCountArgument {
    static let multiples: [(suffixes: [String], factor: Int)] = [
        (["", "b"], 1),
        (["k", "kb", "kib"], 1 << 10),
        (["m", "mb", "mib"], 1 << 20),
        (["g", "gb", "gib"], 1 << 30),
        (["t", "tb", "tib"], 1 << 40),
    ]

    /// What help texts say about the format, once.
    static let formatHint = "64K, 64M, 1G: binary multiples (1K = 1024)"

    static func parse(_ text: String) throws(UnitParseError) -> Int {
        let trimmed = text.trimmingSpaces
        let digits = trimmed.prefix(while: { $0.isASCII && $0.isNumber })
        let suffix = trimmed.dropFirst(digits.count).lowercased()
        guard !digits.isEmpty, !suffix.hasPrefix(".") else {
            throw UnitParseError(description: "give a whole number of bytes, optionally with K, M or G (\(formatHint))")
        }
        guard let factor = multiples.first(where: { $0.suffixes.contains(suffix) })?.factor else {
            throw UnitParseError(description: "unknown unit '\(trimmed.dropFirst(digits.count))'; use K, M or G (\(formatHint))")
        }
        guard let number = Int(digits) else { throw UnitParseError(description: "'\(trimmed)' is too large") }
        let (bytes, overflow) = number.multipliedReportingOverflow(by: factor)
        guard !overflow else { throw UnitParseError(description: "'\(trimmed)' is too large") }
        return bytes
    }
}

/// Durations as options take them: seconds as a plain number (`30`, `1.5`), or a number with a
/// unit: `250ms`, `30s`, `5m`, `1h`, `1d`. Returned in seconds.
enum DurationArgument {
    static let units: [(suffix: String, seconds: Double)] = [
        ("ms", 0.001), ("s", 1), ("sec", 1), ("m", 60), ("min", 60), ("h", 3600), ("d", 86400),
    ]

    static func parse(_ text: String) throws(UnitParseError) -> Double {
        let trimmed = text.trimmingSpaces.lowercased()
        let numberPart = trimmed.prefix(while: { $0.isASCII && ($0.isNumber || $0 == "." || $0 == "-" || $0 == "+") })
        let unit = trimmed.dropFirst(numberPart.count)
        guard !numberPart.isEmpty, let number = Double(numberPart), number.isFinite else {
            throw UnitParseError(description: "give a duration such as 30, 30s, 5m, 1h or 250ms (a plain number is seconds)")
        }
        guard let scale = unit.isEmpty ? 1 : units.first(where: { $0.suffix == unit })?.seconds else {
            throw UnitParseError(description: "unknown unit '\(unit)'; use ms, s, m, h or d (a plain number is seconds)")
        }
        return number * scale
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
