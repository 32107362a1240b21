import ArgumentParser
import Daemon
import enum Daemon.ExitStatus  // Swift Testing has an ExitStatus too
import Foundation
import Machines
@testable import bletransfer
import Testing
import TestSupport

/// What `arguments` come to before anything runs: help, or a usage error in the one voice.
private func outcome(_ arguments: [String]) -> CommandLineFront.Outcome? {
    if case .finished(let outcome) = CommandLineFront.parse(arguments, columns: 80) { return outcome }
    return nil
}

/// Runs the `bletransfer` executable built with the tests, 80 columns wide.
private func runCLI(_ arguments: [String], environment extra: [String: String] = [:]) throws -> BuiltTool.Result {
    try BuiltTool.run(arguments, extraEnvironment: ["COLUMNS": "80"].merging(extra) { _, new in new })
}

/// One line `bletransfer: error: …`, optionally one `hint: …` line, nothing else.
private func isOneVoice(_ text: String) -> Bool {
    let lines = text.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
    guard text.hasSuffix("\n"), let first = lines.first, first.hasPrefix("bletransfer: error: ") else { return false }
    return lines.count == 1 || (lines.count == 2 && lines.last!.hasPrefix("hint: "))
}

@Suite struct HelpLayoutTests {
    static let helpRequests: [[String]] = [
        ["--help"], ["help", "send"], ["help", "receive"], ["help", "daemon"], ["help", "status"],
        ["help", "keygen"], ["help", "id"], ["help", "peers"], ["help", "pair"], ["peers", "--help"], ["send", "--help"], ["daemon", "-h"],
        // Every peers command has its examples too.
        ["peers", "list", "--help"], ["peers", "add", "--help"], ["peers", "remove", "--help"], ["peers", "rename", "--help"],
        ["peers", "fingerprint", "--help"], ["help", "peers", "rename"],
    ]

    @Test(arguments: helpRequests)
    func helpFitsAScreenWithUsageFirstAndExamples(arguments: [String]) throws {
        let help = try #require(outcome(arguments))
        #expect(help.status == 0)
        #expect(help.standardError.isEmpty)
        let lines = help.standardOutput.split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        #expect(lines.count <= 60, "\(arguments): \(lines.count) lines")
        #expect(lines.allSatisfy { $0.count <= 80 }, "\(arguments)")
        #expect(lines.first?.hasPrefix("USAGE: bletransfer") == true, "\(arguments): \(lines.first ?? "")")
        #expect(lines.contains("EXAMPLES:"), "\(arguments)")
        #expect(!help.standardOutput.contains("OVERVIEW:"))
        // ArgumentParser's "(default: …)" is the only one on a line.
        for line in lines {
            #expect(line.components(separatedBy: "default").count <= 2, "\(arguments): \(line)")
        }
    }

    @Test func optionsAreGroupedByPurpose() throws {
        let send = try #require(outcome(["help", "send"])).standardOutput
        let headings = send.split(separator: "\n").filter { $0.hasSuffix(":") && $0.first?.isUppercase == true }
        #expect(headings == ["ARGUMENTS:", "INPUT AND OUTPUT:", "PEERS AND TRUST:", "BLUETOOTH:", "LIMITS:", "ADVANCED:",
                             "OPTIONS:", "EXAMPLES:"])
        #expect(send.contains("-f, --file <PATH>") && send.contains("-q, --quiet") && send.contains("-v, --verbose"))
        let receive = try #require(outcome(["help", "receive"])).standardOutput
        #expect(receive.contains("-o, --output <PATH>"))
    }

    @Test func optionsThatDoNotApplyAreNotListed() throws {
        let daemon = try #require(outcome(["help", "daemon"])).standardOutput
        #expect(!daemon.contains("--timeout"))
        #expect(!daemon.contains("--quiet"))
        #expect(try #require(outcome(["help", "send"])).standardOutput.contains("--timeout <TIME>"))
    }

    @Test func exitStatusesAreListedOnceInTheTopLevelHelp() throws {
        let top = try #require(outcome(["--help"])).standardOutput
        for status in ExitStatus.allCases where status != .success {
            #expect(top.contains("\n  \(status.rawValue) "), "\(status)")
        }
        #expect(top.contains("130") && top.contains("143"))
        for command in ["send", "receive", "daemon"] {
            #expect(!(try #require(outcome(["help", command])).standardOutput.contains("EXIT STATUS")))
        }
    }

    @Test func theManualGetsTheLongerTextAfterTheScreensOwn() {
        #expect(!HelpText.isDescribingForManual)
        #expect(HelpText.discussion("short", manual: "long") == "short")
        #expect(SendCommand.configuration.discussion.contains("EXAMPLES:"))
    }

    @Test func versionIsUnchanged() throws {
        let version = try #require(outcome(["--version"]))
        #expect(version.status == 0 && version.standardOutput == BLETransferVersion.current + "\n")
    }
}

@Suite struct UsageErrorTests {
    @Test func aMistypedCommandSuggestsTheNearest() throws {
        let sned = try #require(outcome(["sned", "hi"]))
        #expect(sned.status == ExitStatus.usage.rawValue)
        #expect(sned.standardOutput.isEmpty)
        #expect(sned.standardError.hasPrefix("bletransfer: error: unknown command 'sned'\nhint: did you mean 'send'?"))
        #expect(isOneVoice(sned.standardError))
        #expect(try #require(outcome(["recieve"])).standardError.contains("did you mean 'receive'?"))
        #expect(try #require(outcome(["stauts"])).standardError.contains("did you mean 'status'?"))
        let nothingClose = try #require(outcome(["frobnicate"]))
        #expect(nothingClose.standardError.contains("hint: the commands are send, receive, status, daemon, pair, keygen, id, peers"))
    }

    @Test func helpForAnUnknownCommandFails() throws {
        let help = try #require(outcome(["help", "foo"]))
        #expect(help.status == ExitStatus.usage.rawValue)
        #expect(help.standardOutput.isEmpty)
        #expect(help.standardError.hasPrefix("bletransfer: error: unknown command 'foo'\nhint: "))
        #expect(try #require(outcome(["help", "sedn"])).standardError.contains("did you mean 'send'?"))
    }

    @Test func anUnknownOptionSuggestsTheNearest() throws {
        let typo = try #require(outcome(["send", "--fiel", "x"]))
        #expect(typo.status == ExitStatus.usage.rawValue)
        #expect(typo.standardError == "bletransfer: error: unknown option '--fiel' for 'send'\nhint: did you mean '--file'?\n")
        #expect(try #require(outcome(["receive", "--ouptut-dir", "x"])).standardError.contains("did you mean '--output-dir'?"))
    }

    @Test func anUnknownOptionWithAValueIsReportedAsUnknown() throws {
        // Not as the MESSAGE its value would otherwise have become.
        let run = try #require(outcome(["send", "--recipient", "hostb", "--file", "x"]))
        #expect(run.status == ExitStatus.usage.rawValue)
        #expect(run.standardError.hasPrefix("bletransfer: error: unknown option '--recipient' for 'send'\n"))
        #expect(isOneVoice(run.standardError))
    }

    @Test func anOptionOfAnotherCommandSaysWhose() throws {
        let run = try #require(outcome(["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "--timeout", "5"]))
        #expect(run.status == ExitStatus.usage.rawValue)
        #expect(run.standardError == "bletransfer: error: unknown option '--timeout' for 'daemon'\n"
                + "hint: --timeout is an option of 'send', 'receive', 'pair'\n")
    }

    @Test(arguments: [
        ["send", "--count", "two", "hi"],
        ["send", "--count", "2", "--forever", "hi"],
        ["receive", "--max-size", "1X"],
        ["receive", "--timeout", "soon"],
        ["receive", "--output", "a", "--output-dir", "b"],
        ["daemon"],
        ["daemon", "--role", "nobody"],
        ["send", "-x"],
        ["id", "extra"],
        ["send", "--json", "--quiet", "hi"],
    ])
    func everyUsageErrorIsOneLineAndStatus64(arguments: [String]) throws {
        let run = try #require(outcome(arguments))
        #expect(run.status == ExitStatus.usage.rawValue, "\(arguments)")
        // With --json the failure is also the last event on standard output; else nothing there.
        #expect(arguments.contains("--json") ? run.standardOutput.hasPrefix("{\"event\":\"error\"") : run.standardOutput.isEmpty)
        #expect(isOneVoice(run.standardError), "\(arguments): \(run.standardError)")
        #expect(!run.standardError.contains("Usage:") && !run.standardError.contains("Error:"))
    }

    @Test func theBinarySpeaksTheSameVoice() throws {
        let sned = try runCLI(["sned", "hi"])
        #expect(sned.status == 64)
        #expect(sned.out.isEmpty)
        #expect(sned.err.hasPrefix("bletransfer: error: unknown command 'sned'\nhint: did you mean 'send'?"))
        let help = try runCLI(["help", "send"])
        #expect(help.status == 0 && help.out.hasPrefix("USAGE: bletransfer send"))
        #expect(help.out.split(separator: "\n", omittingEmptySubsequences: false).count <= 61)
        let helpFoo = try runCLI(["help", "foo"])
        #expect(helpFoo.status == 64 && helpFoo.out.isEmpty && isOneVoice(helpFoo.err))
        let bad = try runCLI(["receive", "--max-size", "12Q"])
        #expect(bad.status == 64)
        #expect(bad.err.hasPrefix("bletransfer: error: the value '12Q' is invalid for '--max-size <BYTES>': unknown unit 'Q'"))
        #expect(isOneVoice(bad.err))
    }

    /// Without authorized peers a run says so in one short line, once Bluetooth can be used
    /// (PeripheralSendCommandTests runs it on BlueZoo); a run that cannot start on Bluetooth says
    /// only why, in status's words with its fix, and nothing else first.
    @Test func aRunThatCannotStartSaysOnlyWhyWithStatussFix() throws {
        let directory = NSTemporaryDirectory() + "notice-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "HOME": directory,
                           "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/no-bus"]
        for command in [["send", "hi"], ["receive"], ["receive", "--output-dir", directory + "/inbox"]] {
            let run = try runCLI(command + ["--timeout", "5"], environment: environment)
            #expect(run.status == ExitStatus.unavailable.rawValue, "\(command): \(run.err)")
            #expect(isOneVoice(run.err) && run.err.contains("\nhint: "), "\(command): \(run.err)")
            #expect(!run.err.contains("warning"), "\(command): \(run.err)")
        }
        // The radio is checked before the output directory is made.
        #expect(!FileManager.default.fileExists(atPath: directory + "/inbox"))
        #expect(("bletransfer: warning: " + TrustOptions.unauthenticated).count <= 100)
        #expect(TrustOptions.unauthenticated.contains("'bletransfer pair'"))
    }

    /// Exit codes as documented: an output directory that cannot be made is 73, before any
    /// Bluetooth; a path that is a directory names that, not a "line 0".
    @Test func aBadOutputDirectoryIs73AndADirectoryIsNotALine() throws {
        let directory = NSTemporaryDirectory() + "exit-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/no-bus"]
        try Data("x".utf8).write(to: URL(fileURLWithPath: directory + "/file"))
        for outputDirectory in [directory + "/file", directory + "/file/inbox"] {
            let run = try runCLI(["receive", "--output-dir", outputDirectory], environment: environment)
            #expect(run.status == ExitStatus.cannotCreate.rawValue, "\(outputDirectory): \(run.err)")
            #expect(isOneVoice(run.err))
        }
        let output = try runCLI(["receive", "-o", directory + "/missing/x.txt"], environment: environment)
        #expect(output.status == ExitStatus.cannotCreate.rawValue, "\(output.err)")
        for option in ["--authorized-peers", "--identity"] {
            let run = try runCLI(["send", "hi", option, directory], environment: environment)
            #expect(!run.err.contains("line 0") && !run.err.contains(":0:"), "\(option): \(run.err)")
            #expect(run.err.contains("is a directory, not a file"), "\(option): \(run.err)")
        }
    }

    @Test func theDaemonsSetupFailuresSpeakTheSameVoice() throws {
        let directory = NSTemporaryDirectory() + "voice-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "HOME": directory]
        let key = try runCLI(["keygen"], environment: environment)
        #expect(key.status == 0)
        try key.out.write(toFile: directory + "/bletransfer/authorized-peers", atomically: true, encoding: .utf8)
        // /proc takes no new directories, whoever asks.
        let run = try runCLI(["daemon", "--role", "receiver", "--output-dir", "/proc/bletransfer-voice/inbox"],
                             environment: environment)
        #expect(run.status == ExitStatus.cannotCreate.rawValue)
        #expect(run.err == "bletransfer: error: --output-dir: cannot create directory /proc/bletransfer-voice/inbox: "
                + "No such file or directory\n")
        // With --json, the same failure is the last event.
        let json = try runCLI(["daemon", "--role", "receiver", "--output-dir", "/proc/bletransfer-voice/inbox", "--json"],
                              environment: environment)
        #expect(json.status == ExitStatus.cannotCreate.rawValue)
        let event = try #require(try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [String: Any])
        #expect(event["event"] as? String == "error" && event["kind"] as? String == "cannotCreate" && event["exitStatus"] as? Int == 73)
    }

    /// Did-you-mean wherever a name is typed: a group's command, a value from a fixed list, an
    /// option typed as a command. The tool's words, not the parser's "Please provide one of".
    @Test func namesTypedAnywhereGetTheNearestSuggested() throws {
        let lst = try #require(outcome(["peers", "lst"]))
        #expect(lst.status == 64 && isOneVoice(lst.standardError))
        #expect(lst.standardError == "bletransfer: error: unknown command 'lst' for 'peers'\n"
                + "hint: did you mean 'peers list'? ('bletransfer peers --help' lists them)\n")
        let role = try #require(outcome(["daemon", "--role", "recevier", "--output-dir", "/tmp/x"]))
        #expect(role.status == 64)
        #expect(role.standardError == "bletransfer: error: --role: 'recevier' is not one of receiver, sender\n"
                + "hint: did you mean '--role receiver'?\n")
        #expect(!role.standardError.contains("Please provide"))
        let level = try #require(outcome(["daemon", "--role", "sender", "--outbox", "/tmp/x", "--log-level", "warn"]))
        #expect(level.standardError.contains("hint: did you mean '--log-level warning'?"), "\(level.standardError)")
        let version = try #require(outcome(["version"]))
        #expect(version.status == 64)
        #expect(version.standardError.contains("hint: did you mean '--version'?"))
    }

    /// A negative number says so, instead of "missing value" (the parser read it as an option).
    @Test func negativeNumbersSayTheyMustBePositive() throws {
        for arguments in [["send", "--count", "-1", "hi"], ["receive", "--timeout=-5"], ["receive", "--max-size", "-1M"],
                          ["pair", "--timeout", "-2"]] {
            let run = try #require(outcome(arguments))
            #expect(run.status == 64, "\(arguments)")
            #expect(run.standardError.contains("must be positive"), "\(arguments): \(run.standardError)")
            #expect(!run.standardError.contains("missing value"))
        }
        // A signal strength is negative by nature.
        #expect(outcome(["receive", "--min-rssi", "-70"]) == nil)
    }

    /// Exit codes as documented: `pair --timeout 0` is a usage error, not an internal one.
    @Test func pairWithAZeroTimeoutIsAUsageError() throws {
        let run = try runCLI(["pair", "--timeout", "0"])
        #expect(run.status == ExitStatus.usage.rawValue, "\(run.err)")
        #expect(isOneVoice(run.err))
    }

    /// --json: a usage error is also the last event on standard output.
    @Test func aUsageErrorWithJSONIsAlsoAnErrorEvent() throws {
        let run = try #require(outcome(["send", "--json", "--count", "two", "hi"]))
        #expect(run.status == 64)
        let event = try #require(try JSONSerialization.jsonObject(with: Data(run.standardOutput.utf8)) as? [String: Any])
        #expect(event["event"] as? String == "error" && event["kind"] as? String == "usage" && event["exitStatus"] as? Int == 64)
        #expect((event["text"] as? String)?.contains("--count") == true)
        #expect(isOneVoice(run.standardError))
    }

    @Test func nearestIsByEditDistance() {
        #expect(CommandLineFront.editDistance("sned", "send") == 1)
        #expect(CommandLineFront.editDistance("", "id") == 2)
        #expect(CommandLineFront.nearest(to: "sned", among: ["send", "receive"]) == "send")
        #expect(CommandLineFront.nearest(to: "rec", among: ["send", "receive"]) == "receive")
        #expect(CommandLineFront.nearest(to: "xyzzy", among: ["send", "receive"]) == nil)
    }
}

@Suite struct FailureKindStatusTests {
    /// Each failure kind ends with the exit status of its name (sysexits(3)), and names it back.
    @Test func everyKindHasTheStatusOfItsName() {
        for kind in FailureKind.allCases {
            #expect(ExitStatus(kind).failureKindName == kind.rawValue)
            #expect(ExitStatus(kind) != .success)
        }
        #expect(ExitStatus(.usage) == .usage && ExitStatus(.configuration) == .configuration)
    }
}

@Suite struct UnitArgumentTests {
    @Test func byteCountsTakeBinaryMultiples() throws {
        let cases: [(String, Int)] = [
            ("1048576", 1_048_576), ("0", 0), ("64K", 64 << 10), ("64KiB", 64 << 10), ("64k", 64 << 10),
            ("64M", 64 << 20), ("64MiB", 64 << 20), ("64MB", 64 << 20), ("1G", 1 << 30), ("1GiB", 1 << 30),
            ("512B", 512), (" 2M ", 2 << 20),
            // A fraction of a multiple, as rsync takes it, rounded down to whole bytes.
            ("1.5M", 3 << 19), ("0.5K", 512), ("1.1K", 1126), (".5G", 1 << 29),
        ]
        for (text, bytes) in cases { #expect(try ByteCountArgument.parse(text) == bytes, "\(text)") }
    }

    @Test func badByteCountsSayWhatIsTaken() {
        for bad in ["", "M", "-1", "1.5", "1.2.3M", "64X", "64 M", "1Gibibyte", "99999999999999999999", "9999999999T",
                    "99999999999.5T"] {
            #expect(throws: UnitParseError.self, "\(bad)") { try ByteCountArgument.parse(bad) }
            do {
                _ = try ByteCountArgument.parse(bad)
            } catch {
                #expect(!error.description.contains("\n") && !error.description.isEmpty)
            }
        }
        #expect(throws: UnitParseError(description: "unknown unit 'X'; use K, M or G (64K, 1.5M, 1G: binary multiples (1K = 1024))")) {
            try ByteCountArgument.parse("64X")
        }
        #expect(throws: UnitParseError(description: "a size must be positive, not '-1'")) { try ByteCountArgument.parse("-1") }
    }

    @Test func durationsTakeUnitsAndPlainSeconds() throws {
        let cases: [(String, Double)] = [
            ("30", 30), ("1.5", 1.5), ("30s", 30), ("5m", 300), ("1h", 3600), ("250ms", 0.25), ("2d", 172_800),
            ("5min", 300), ("0", 0),
            // Several units in a row, as systemd takes them.
            ("1m30s", 90), ("1h 30m", 5400), ("1.5h", 5400), ("2h5m10s", 7510), ("1d12h", 129_600), ("5 minutes", 300),
            ("1m 500ms", 60.5),
        ]
        for (text, seconds) in cases { #expect(try DurationArgument.parse(text) == seconds, "\(text)") }
    }

    @Test func badDurationsSayWhatIsTaken() {
        for bad in ["", "s", "5x", "nan", "inf", "1e400", "--5", "-5", "1m30", "m30s", "1..5s"] {
            #expect(throws: UnitParseError.self, "\(bad)") { try DurationArgument.parse(bad) }
        }
        #expect(throws: UnitParseError(description: "a duration must be positive, not '-5'")) { try DurationArgument.parse("-5") }
    }

    @Test func optionsTakeSizesAndDurations() throws {
        let receive = try #require(try BLETransferCommand.parseAsRoot(
            ["receive", "--max-size", "1M", "--timeout", "5m", "--idle-timeout", "250ms", "--output-dir", "/tmp/x",
             "--reserve", "64MiB", "--quota-bytes", "1G", "--min-rate", "2K"]) as? ReceiveCommand)
        #expect(receive.messageLimits.maximumSize == 1 << 20)
        #expect(receive.timeout.timeout == 300)
        #expect(receive.messageLimits.idle.idleTimeout == 0.25)
        #expect(receive.bounds.reserve == 64 << 20 && receive.bounds.quotaBytes == 1 << 30 && receive.bounds.minimumRate == 2048)
        let send = try #require(try BLETransferCommand.parseAsRoot(
            ["send", "--ack-timeout", "1m", "--unsubscribe-timeout", "30s", "--value-size", "512", "hi"]) as? SendCommand)
        #expect(send.bounds.acknowledgementTimeout == 60 && send.bounds.unsubscribeTimeout == 30)
        let daemon = try #require(try BLETransferCommand.parseAsRoot(
            ["daemon", "--role", "sender", "--outbox", "/tmp/x", "--max-size", "1G", "--settle-time", "500ms"]) as? DaemonCommand)
        #expect(daemon.size.maximumSize == 1 << 30 && daemon.settleTime == 0.5)
    }
}

@Suite struct ShortOptionTests {
    @Test func shortOptionsAndStandardOutput() throws {
        let send = try #require(try BLETransferCommand.parseAsRoot(["send", "-f", "/etc/hostname", "-q"]) as? SendCommand)
        #expect(send.inputOptions.file == ["/etc/hostname"] && send.reporting.quiet)
        #expect(send.reporting.outputMode == .quiet)
        let receive = try #require(try BLETransferCommand.parseAsRoot(["receive", "-o", "note.txt", "-v"]) as? ReceiveCommand)
        #expect(receive.outputPath == "note.txt" && receive.reporting.verbose)
        let daemon = try #require(try BLETransferCommand.parseAsRoot(
            ["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "-v"]) as? DaemonCommand)
        #expect(daemon.logging.verbose)
    }

    @Test func outputDashIsStandardOutput() throws {
        let one = try #require(try BLETransferCommand.parseAsRoot(["receive", "--output", "-"]) as? ReceiveCommand)
        #expect(one.outputPath == nil)
        // Standard output takes any number of messages, one after another.
        let many = try #require(try BLETransferCommand.parseAsRoot(["receive", "-o", "-", "--forever"]) as? ReceiveCommand)
        #expect(many.outputPath == nil && many.forever)
        let withJSON = try #require(outcome(["receive", "-o", "-", "--json"]))
        #expect(withJSON.status == ExitStatus.usage.rawValue)
        #expect(withJSON.standardError.contains("--output - and --json cannot be combined"))
        #expect(try #require(outcome(["receive", "-o", "file", "--forever"])).status == ExitStatus.usage.rawValue)
    }
}
