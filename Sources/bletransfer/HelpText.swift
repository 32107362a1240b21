
/// Help that fits a screen. `--help` shows USAGE first, one line of what the command does, the options by purpose,
/// then a short discussion with EXAMPLES; the longer explanations are the man pages', which `generate-manual` builds
/// from `--experimental-dump-help`: only then does a command's discussion carry its `manual` part.
enum HelpText {
    /// Whether this run only describes the commands for `generate-manual`.
    static let isDescribingForManual = CommandLine.arguments.contains("--experimental-dump-help")

    /// A command's discussion: `screen` in `--help`, `screen` and `manual` in the man page.
    static func discussion(_ screen: String, manual: String) -> String {
        isDescribingForManual ? manual + "\n\n" + screen : screen
    }

    /// ArgumentParser's help ("OVERVIEW: abstract\n\ndiscussion\n\nUSAGE: ...\n\n sections") as USAGE, abstract,
    /// sections, discussion, then "See 'bletransfer help <subcommand>'". Other text is returned as is.
    static func screen(_ help: String) -> String {
        var lines = help.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        while lines.last?.isEmpty == true { lines.removeLast() }
        guard let usageStart = lines.firstIndex(where: { $0.hasPrefix("USAGE: ") }) else { return help }
        let usageEnd = lines[usageStart...].firstIndex(where: \.isEmpty) ?? lines.endIndex
        let usage = lines[usageStart..<usageEnd]

        var overview = Array(lines[..<usageStart])
        while overview.last?.isEmpty == true { overview.removeLast() }
        if let first = overview.first, first.hasPrefix("OVERVIEW: ") {
            overview[0] = String(first.dropFirst("OVERVIEW: ".count))
        }
        let abstractEnd = overview.firstIndex(where: \.isEmpty) ?? overview.endIndex
        let abstract = overview[..<abstractEnd]
        let discussion = overview[abstractEnd...].drop(while: \.isEmpty)

        var sections = Array(lines[usageEnd...].drop(while: \.isEmpty))
        var closing: [String] = []
        if let see = sections.lastIndex(where: { $0.hasPrefix("  See '") }) {
            closing = [sections[see].trimmingLeadingSpaces]
            sections.removeSubrange(see...)
            while sections.last?.isEmpty == true { sections.removeLast() }
        }

        var parts: [[String]] = [Array(usage)]
        if !abstract.isEmpty { parts.append(Array(abstract)) }
        if !sections.isEmpty { parts.append(sections) }
        if !discussion.isEmpty { parts.append(Array(discussion)) }
        if !closing.isEmpty { parts.append(closing) }
        return parts.map { $0.joined(separator: "\n") }.joined(separator: "\n\n") + "\n"
    }
}

extension String {
    fileprivate var trimmingLeadingSpaces: String { String(drop(while: { $0 == " " })) }
}
