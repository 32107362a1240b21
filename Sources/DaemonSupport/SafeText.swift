/// Peer-controlled text (device names and aliases, addresses as BlueZ reports them, compat messages, reasons quoting
/// them) made safe for a terminal or a log: every character that a terminal acts on instead of showing, or that
/// reorders or breaks what follows, becomes a visible escape. The one function every human-readable output goes
/// through.
///
/// Escaped: C0 controls (ESC included, so no escape sequence survives), DEL, C1 controls (U+0080–U+009F: a UTF-8
/// terminal may take U+009B as CSI), the bidirectional overrides, embeddings, isolates and marks (U+061C, U+200E/F,
/// U+202A–U+202E, U+2066–U+2069) that can make a line read differently from what it holds, and the line and paragraph
/// separators U+2028/U+2029. Everything else, other scripts and emoji included, is kept.
package enum SafeText {
    /// `text` with the characters above written as `\xNN` (below U+0100) or `\u{NNNN}`; line feeds and tabs as `\n`
    /// and `\t` unless `keepingLineBreaks` (a message body shown on a terminal keeps its lines and indentation);
    /// `quoting`: `"` and `\` too, as `\"` and `\\` (a quoted value of a log line).
    package static func escape(_ text: String, keepingLineBreaks: Bool = false, quoting: Bool = false) -> String {
        func escapes(_ scalar: Unicode.Scalar) -> Bool {
            needsEscape(scalar, keepingLineBreaks: keepingLineBreaks) || quoting && (scalar == "\"" || scalar == "\\")
        }
        guard text.unicodeScalars.contains(where: escapes) else { return text }
        var result = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            guard escapes(scalar) else {
                result.append(scalar)
                continue
            }
            let escaped = switch scalar {
            case "\n": "\\n"
            case "\t": "\\t"
            case "\r": "\\r"
            case "\"", "\\": "\\" + String(scalar)
            default: escapeCode(scalar)
            }
            result.append(contentsOf: escaped.unicodeScalars)
        }
        return String(result)
    }

    /// Whether `scalar` is one that ``escape(_:keepingLineBreaks:quoting:)`` rewrites (quoting aside).
    package static func needsEscape(_ scalar: Unicode.Scalar, keepingLineBreaks: Bool = false) -> Bool {
        switch scalar.value {
        case 0x0A, 0x09: !keepingLineBreaks
        case 0x00...0x1F, 0x7F...0x9F: true
        case 0x061C, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069, 0x2028, 0x2029: true
        default: false
        }
    }

    /// `\xNN` below U+0100, `\u{NNNN}` above.
    package static func escapeCode(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16)
        if scalar.value < 0x100 { return "\\x" + (hex.count < 2 ? "0" + hex : hex) }
        return "\\u{" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex + "}"
    }
}
