import ArgumentParser
import Daemon
import Foundation

/// The command line's one voice. Every failure a user can cause ends as one line `bletransfer: error: …` on standard
/// error, where it helps followed by one `hint: …` line, and a sysexits(3) status (`ExitStatus`): ArgumentParser's
/// errors too, worded again here with the nearest subcommand or option. Help gets `HelpText.screen`'s layout.
enum CommandLineFront {
    /// What a command line comes to before anything runs, or after a command failed.
    struct Outcome: Equatable {
        var standardOutput = ""
        var standardError = ""
        var status: Int32 = 0

        static func failure(_ message: String, hint: String? = nil, status: ExitStatus = .usage) -> Outcome {
            var text = "bletransfer: error: \(message)\n"
            if let hint { text += "hint: \(hint)\n" }
            return Outcome(standardError: text, status: status.rawValue)
        }

        func write() {
            if !standardOutput.isEmpty { FileHandle.standardOutput.write(Data(standardOutput.utf8)) }
            if !standardError.isEmpty { FileHandle.standardError.write(Data(standardError.utf8)) }
        }
    }

    enum Parsed {
        case run(any ParsableCommand)
        /// Nothing to run: help, the version, or a usage error.
        case finished(Outcome)
    }

    typealias Root = BLETransferCommand

    /// The subcommands as typed, in the order the help lists them.
    static var subcommandNames: [String] { Root.configuration.subcommands.map { $0._commandName } }

    /// Parses `arguments` (without the program name) into the command to run, or the outcome that ends the process
    /// without running one. `columns` is the help's width (nil: the terminal's).
    static func parse(_ arguments: [String], columns: Int? = nil) -> Parsed {
        if let unknown = unknownSubcommand(in: arguments) { return .finished(json(unknown, arguments: arguments)) }
        if let negative = negativeValue(in: arguments) { return .finished(json(negative, arguments: arguments)) }
        do {
            var command = try Root.parseAsRoot(arguments)
            // `help`, `--help` and `-h` parse into ArgumentParser's help command, which throws the help text.
            if type(of: command)._commandName == "help" {
                try command.run()
                return .finished(Outcome())
            }
            return .run(command)
        } catch {
            return .finished(json(outcome(for: error, arguments: arguments, columns: columns), arguments: arguments))
        }
    }

    /// A usage error of a command line asking for `--json`: the same failure as its last event, an `error` event on
    /// standard output (kind `usage`), so a script reading the events learns how the command ended.
    static func json(_ outcome: Outcome, arguments: [String]) -> Outcome {
        guard outcome.status == ExitStatus.usage.rawValue, outcome.standardOutput.isEmpty,
              arguments.prefix(while: { $0 != "--" }).contains("--json") else { return outcome }
        let lines = outcome.standardError.split(separator: "\n").map(String.init)
        let prefix = "bletransfer: error: "
        guard let first = lines.first, first.hasPrefix(prefix) else { return outcome }
        var event = ErrorJSONEvent(String(first.dropFirst(prefix.count)), kind: "usage", exitStatus: Int(ExitStatus.usage.rawValue))
        event.hint = lines.dropFirst().first.flatMap { $0.hasPrefix("hint: ") ? String($0.dropFirst(6)) : nil }
        var result = outcome
        result.standardOutput = JSONEvents.line("error", event) + "\n"
        return result
    }

    /// The outcome of an error thrown while parsing or by a command's `run()`.
    static func outcome(for error: any Error, arguments: [String], columns: Int? = nil) -> Outcome {
        let code = Root.exitCode(for: error)
        if code == .success {
            // Help, --version, a completion script: what ArgumentParser prints, on standard output.
            let text = Root.fullMessage(for: error, columns: columns)
            let shown = text.hasPrefix("OVERVIEW: ") || text.hasPrefix("USAGE: ") ? HelpText.screen(text) : text
            return Outcome(standardOutput: shown.hasSuffix("\n") || shown.isEmpty ? shown : shown + "\n")
        }
        if let exit = error as? ExitCode {
            // The command has said why already (`exitCode(reporting:json:)`).
            return Outcome(status: exit.rawValue)
        }
        let subcommand = self.subcommand(in: arguments)
        if code == .validationFailure {
            // ArgumentParser validates a command before it looks for unknown options: else an unknown option would be
            // reported as whatever it left behind.
            if let unknown = unknownOption(in: arguments, subcommand: subcommand) { return unknown }
            if let choice = invalidChoice(Root.message(for: error)) { return choice }
            var message = Root.message(for: error)
            if let first = message.first, message.dropFirst().first?.isLowercase == true {
                message = first.lowercased() + message.dropFirst()
            }
            message = message.replacingOccurrences(of: "\n", with: " ")
            // ArgumentParser's messages begin with a capital or a count ("2 unexpected arguments"); ours need no hint.
            let isArgumentParsers = Root.message(for: error).first.map { $0.isUppercase || $0.isNumber } ?? false
            let helpFor = groupCommand(in: arguments) ?? subcommand
            return .failure(message, hint: isArgumentParsers ? "see '\(helpCommand(helpFor))'" : nil)
        }
        // Anything else is a bug: the commands report what a user can cause themselves.
        let message = Root.message(for: error)
        return .failure(message.isEmpty ? "\(error)" : message, status: .software)
    }

    // MARK: - Unknown subcommands and options

    /// `sned hi`, `help foo`, `peers lst`: a word where a command is due that names none.
    static func unknownSubcommand(in arguments: [String]) -> Outcome? {
        guard let first = arguments.first, !first.hasPrefix("-") else { return nil }
        let names = subcommandNames
        if first == "help" {
            guard let asked = arguments.dropFirst().first(where: { !$0.hasPrefix("-") }), !names.contains(asked) else {
                return nil
            }
            return unknownCommand(asked)
        }
        guard names.contains(first) else { return unknownCommand(first) }
        // A group (`peers`): its second word is one of its commands.
        let group = groupCommandNames(of: first)
        if !group.isEmpty, let second = arguments.dropFirst().first, !second.hasPrefix("-"), !group.contains(second),
           second != "help" {
            let message = "unknown command '\(second)' for '\(first)'"
            if let nearest = nearest(to: second, among: group) {
                return .failure(message, hint: "did you mean '\(first) \(nearest)'? ('bletransfer \(first) --help' lists them)")
            }
            return .failure(message, hint: "the '\(first)' commands are \(group.joined(separator: ", "))")
        }
        return nil
    }

    /// The commands of the group `name` (`peers`: list, add…); none for a command without them.
    static func groupCommandNames(of name: String) -> [String] {
        Root.configuration.subcommands.first { $0._commandName == name }?.configuration.subcommands.map { $0._commandName } ?? []
    }

    private static func unknownCommand(_ word: String) -> Outcome {
        let names = subcommandNames
        // `version`, `help-hidden`: an option of the top level typed as a command.
        if let option = OptionTable.of(nil)?.long.keys.first(where: { $0 == word }) {
            return .failure("unknown command '\(word)'", hint: "did you mean '--\(option)'? ('bletransfer --\(option)')")
        }
        if let nearest = nearest(to: word, among: names) {
            return .failure("unknown command '\(word)'", hint: "did you mean '\(nearest)'? ('bletransfer --help' lists the commands)")
        }
        return .failure("unknown command '\(word)'", hint: "the commands are \(names.joined(separator: ", "))")
    }

    /// ArgumentParser's "the value 'X' is invalid for '--opt <V>'. Please provide one of 'a' and 'b'." in the tool's
    /// words: the value, what the option takes, and the nearest.
    static func invalidChoice(_ message: String) -> Outcome? {
        guard let match = message.firstMatch(of: /^The value '(.*)' is invalid for '(-[-A-Za-z0-9]+)[^']*'\. Please provide one of ((?s).*)$/)
        else { return nil }
        let value = String(match.1), option = String(match.2)
        // "'a' and 'b'." or, for longer lists, "the following:" and a "- a" line each.
        var choices = match.3.matches(of: /'([^']*)'/).map { String($0.1) }
        if choices.isEmpty { choices = match.3.matches(of: /- ([^\s]+)/).map { String($0.1) } }
        guard !choices.isEmpty else { return nil }
        let listed = choices.joined(separator: ", ")
        if let nearest = nearest(to: value, among: choices) {
            return .failure("\(option): '\(value)' is not one of \(listed)", hint: "did you mean '\(option) \(nearest)'?")
        }
        return .failure("\(option): '\(value)' is not one of \(listed)", hint: "give one of \(listed)")
    }

    /// Options whose value may be negative (a signal strength in dBm).
    static let optionsTakingNegatives: Set<String> = ["min-rssi"]

    /// `--count -1`, `--timeout=-5`: a negative number given to an option that takes a count, a size or a duration.
    /// ArgumentParser would read `-1` as an option and report a missing value; the tool says what is wrong.
    static func negativeValue(in arguments: [String]) -> Outcome? {
        let subcommand = self.subcommand(in: arguments)
        guard let table = OptionTable.of(subcommand) else { return nil }
        var index = subcommand == nil ? 0 : 1
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" { break }
            guard argument.hasPrefix("--") else { continue }
            let name = String(argument.dropFirst(2).prefix(while: { $0 != "=" }))
            guard table.long[name] == true, !optionsTakingNegatives.contains(name) else { continue }
            let value: String
            if let equals = argument.firstIndex(of: "=") {
                value = String(argument[argument.index(after: equals)...])
            } else if index < arguments.count {
                value = arguments[index]
            } else { continue }
            if value.hasPrefix("-"), let first = value.dropFirst().first, first.isNumber || first == "." {
                return .failure("--\(name): must be positive, not \(value)", hint: "see '\(helpCommand(subcommand))'")
            }
        }
        return nil
    }

    static func subcommand(in arguments: [String]) -> String? {
        guard let first = arguments.first, subcommandNames.contains(first) else { return nil }
        return first
    }

    /// `peers remove` for `peers remove …`: a group's command the arguments name, if any.
    static func groupCommand(in arguments: [String]) -> String? {
        guard arguments.count >= 2, groupCommandNames(of: arguments[0]).contains(arguments[1]) else { return nil }
        return arguments[0] + " " + arguments[1]
    }

    static func helpCommand(_ subcommand: String?) -> String {
        subcommand.map { "bletransfer \($0) --help" } ?? "bletransfer --help"
    }

    /// The first option `subcommand` (nil: root) lacks, as an error naming the nearest or the commands taking it.
    static func unknownOption(in arguments: [String], subcommand: String?) -> Outcome? {
        guard let table = OptionTable.of(subcommand) else { return nil }
        var index = subcommand == nil ? 0 : 1
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if argument == "--" { break }
            if argument.hasPrefix("--") {
                let name = String(argument.dropFirst(2).prefix(while: { $0 != "=" }))
                guard let takesValue = table.long[name] else {
                    return unknownOptionOutcome("--" + name, table: table, subcommand: subcommand)
                }
                if takesValue && !argument.contains("=") { index += 1 }
            } else if argument.hasPrefix("-"), argument.count > 1, Double(argument) == nil {
                for (offset, letter) in argument.dropFirst().enumerated() {
                    guard let takesValue = table.short[letter] else {
                        return unknownOptionOutcome("-\(letter)", table: table, subcommand: subcommand)
                    }
                    if takesValue {
                        if offset == argument.count - 2 { index += 1 }
                        break
                    }
                }
            }
        }
        return nil
    }

    private static func unknownOptionOutcome(_ option: String, table: OptionTable, subcommand: String?) -> Outcome {
        let command = subcommand.map { "'\($0)'" } ?? "bletransfer"
        let message = "unknown option '\(option)' for \(command)"
        if let nearest = nearest(to: option, among: table.long.keys.map { "--" + $0 }) {
            return .failure(message, hint: "did you mean '\(nearest)'?")
        }
        let elsewhere = subcommandNames.filter { $0 != subcommand && OptionTable.of($0)?.takes(option) == true }
        if !elsewhere.isEmpty {
            return .failure(message, hint: "\(option) is an option of \(elsewhere.map { "'\($0)'" }.joined(separator: ", "))")
        }
        return .failure(message, hint: "see '\(helpCommand(subcommand))'")
    }

    /// The candidate closest to `word` by edit distance (a swap of two neighbours counts once), when close enough to
    /// be what was meant; or the one candidate `word` begins.
    static func nearest(to word: String, among candidates: [String]) -> String? {
        let limit = max(1, min(3, word.count / 3))
        let scored = candidates.map { ($0, editDistance(word, $0)) }.filter { $0.1 <= limit }
        if let best = scored.min(by: { $0.1 < $1.1 || ($0.1 == $1.1 && $0.0 < $1.0) }) { return best.0 }
        let prefixed = candidates.filter { $0.hasPrefix(word) && word.count >= 2 && word != "--" }
        return prefixed.count == 1 ? prefixed[0] : nil
    }

    /// Optimal string alignment distance: insertions, deletions, substitutions and adjacent swaps cost 1 each.
    static func editDistance(_ a: String, _ b: String) -> Int {
        let a = Array(a), b = Array(b)
        if a.isEmpty || b.isEmpty { return max(a.count, b.count) }
        var d = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
        for i in 0...a.count { d[i][0] = i }
        for j in 0...b.count { d[0][j] = j }
        for i in 1...a.count {
            for j in 1...b.count {
                let cost = a[i - 1] == b[j - 1] ? 0 : 1
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost)
                if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                    d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
                }
            }
        }
        return d[a.count][b.count]
    }
}

/// A command's option names and whether each takes a value, as `--experimental-dump-help` describes them.
struct OptionTable {
    var long: [String: Bool] = [:]
    var short: [Character: Bool] = [:]

    func takes(_ option: String) -> Bool {
        if option.hasPrefix("--") { return long[String(option.dropFirst(2))] != nil }
        return option.count == 2 && short[option.last!] != nil
    }

    private struct Tool: Decodable {
        var command: Command
    }

    private struct Command: Decodable {
        var commandName: String
        var subcommands: [Command]?
        var arguments: [Argument]?
    }

    private struct Argument: Decodable {
        var kind: String
        var names: [Name]?
    }

    private struct Name: Decodable {
        var kind: String
        var name: String
    }

    /// The table of `subcommand`, or of the root command when nil.
    static func of(_ subcommand: String?) -> OptionTable? {
        guard let tool = try? JSONDecoder().decode(Tool.self, from: Data(BLETransferCommand._dumpHelp().utf8)) else {
            return nil
        }
        let command = subcommand.map { name in tool.command.subcommands?.first { $0.commandName == name } } ?? tool.command
        // A group (`peers`): its commands' options are their own; ArgumentParser's message stands.
        guard let command, subcommand == nil || command.subcommands?.isEmpty != false else { return nil }
        // What ArgumentParser answers on every command.
        var table = OptionTable(long: ["help": false, "help-hidden": false, "experimental-dump-help": false],
                                short: ["h": false])
        if subcommand == nil {
            table.long["version"] = false
            table.long["generate-completion-script"] = true
        }
        for argument in command.arguments ?? [] where argument.kind != "positional" {
            let takesValue = argument.kind == "option"
            for name in argument.names ?? [] {
                switch name.kind {
                case "short": if let letter = name.name.first { table.short[letter] = takesValue }
                default: table.long[name.name] = takesValue
                }
            }
        }
        return table
    }
}
