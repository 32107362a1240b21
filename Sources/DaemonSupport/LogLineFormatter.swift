import Logging

/// How a daemon log record becomes one line of text.
///
/// - `journal`: `<N>message key=value …`, where `<N>` is the syslog priority that the journal strips and records as
///   the entry's priority (sd-daemon(3): `<3>` error … `<7>` debug).
/// - `plain`: `LEVEL message key=value …`, for a terminal or a log file.
///
/// Metadata is rendered in key order so equal records give equal lines; values holding spaces, quotes, `=` or control
/// characters are quoted with backslash escapes, so a line never breaks and `key=value` pairs stay unambiguous.
package enum LogLineFormat: Sendable, Equatable {
    case journal
    case plain
}

package enum LogLineFormatter {
    /// The whole line, without the trailing newline.
    package static func line(
        format: LogLineFormat, level: Logger.Level, message: String, metadata: Logger.Metadata
    ) -> String {
        var line: String
        switch format {
        case .journal: line = "<\(syslogPriority(level))>"
        case .plain: line = levelName(level) + " "
        }
        // Spaces kept, line breaks not: the journal would split the message into entries, a plain log into lines.
        line += SafeText.escape(message)
        for key in metadata.keys.sorted() {
            line += " " + renderKey(key) + "=" + render(metadata[key]!)
        }
        return line
    }

    /// syslog(3) priorities as journald reads them from a `<N>` prefix.
    package static func syslogPriority(_ level: Logger.Level) -> Int {
        switch level {
        case .critical: 2  // LOG_CRIT
        case .error: 3  // LOG_ERR
        case .warning: 4  // LOG_WARNING
        case .notice: 5  // LOG_NOTICE
        case .info: 6  // LOG_INFO
        case .debug, .trace: 7  // LOG_DEBUG
        }
    }

    package static func levelName(_ level: Logger.Level) -> String { level.rawValue.uppercased() }

    static func renderKey(_ key: String) -> String {
        if key.isEmpty { return "_" }
        return String(key.map { character in
            character.isWhitespace || character == "=" || character == "\""
                || character.unicodeScalars.contains { SafeText.needsEscape($0) } ? "_" : character
        })
    }

    static func render(_ value: Logger.MetadataValue) -> String {
        switch value {
        case .string(let text): quotedIfNeeded(text)
        case .stringConvertible(let convertible): quotedIfNeeded(convertible.description)
        case .array(let values): "[" + values.map(render).joined(separator: ",") + "]"
        case .dictionary(let dictionary):
            "{" + dictionary.keys.sorted().map { renderKey($0) + "=" + render(dictionary[$0]!) }.joined(separator: ",") + "}"
        }
    }

    static func quotedIfNeeded(_ text: String) -> String {
        let needsQuotes = text.isEmpty || text.unicodeScalars.contains { scalar in
            scalar.value <= 0x20 || SafeText.needsEscape(scalar) || scalar == "\"" || scalar == "=" || scalar == "\\"
                || scalar == "," || scalar == "[" || scalar == "]" || scalar == "{" || scalar == "}"
                || scalar.properties.isWhitespace
        }
        guard needsQuotes else { return text }
        return "\"" + SafeText.escape(text, quoting: true) + "\""
    }
}
