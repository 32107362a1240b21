import Foundation
@testable import bletransfer
import Testing
import TestSupport
@testable import Trust

#if canImport(Glibc)
import Glibc
#endif

/// `bletransfer pair` before Bluetooth: what it refuses and what it prepares. The pairing itself
/// is PairingExchangeTests (pure) and the lab's `peers-pair` (two hosts).
@Suite struct PairCommandTests {
    private func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "pair-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func serviceFilesAndExplicitFilesAreNotCombined() throws {
        let result = try runTool(["pair", "--service", "--identity", "/tmp/x"])
        #expect(result.status == 64)
        #expect(result.err.contains("--service chooses the files"))
    }

    @Test func aTimeoutThatIsNotADurationIsRefused() throws {
        let result = try runTool(["pair", "--timeout", "soon"])
        #expect(result.status == 64)
    }

    /// A list the roles would refuse is refused before anyone compares codes, and before
    /// Bluetooth; nothing is made then (a host gets its identity once Bluetooth can pair).
    @Test func aGroupWritableListIsRefusedBeforeBluetoothAndNothingIsMade() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = directory + "/identity"
        let peers = directory + "/authorized-peers"
        try "# nobody yet\n".write(toFile: peers, atomically: true, encoding: .utf8)
        #expect(chmod(peers, 0o666) == 0)
        let terminal = try PseudoTerminal()
        let result = try BuiltTool.run(["pair", "--identity", identity, "--authorized-peers", peers, "--timeout", "1"],
                                       terminal: terminal)
        #expect(result.status == 78)
        #expect(result.err.contains("chmod go-w"))
        #expect(!FileManager.default.fileExists(atPath: identity))
    }

    /// The radio before the identity: no Bluetooth, no key made for a pairing that cannot happen.
    @Test func withoutBluetoothNoIdentityIsMade() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = directory + "/identity"
        let terminal = try PseudoTerminal()
        let result = try BuiltTool.run(["pair", "--identity", identity, "--authorized-peers", directory + "/peers"],
                                       extraEnvironment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=\(directory)/no-bus"],
                                       terminal: terminal)
        #expect(result.status == 69)
        #expect(result.err.contains("\nhint: "), "\(result.err)")
        #expect(!FileManager.default.fileExists(atPath: identity))
    }

    /// M-1: no answer from a pipe. Before anything is made or Bluetooth touched, `pair` wants a
    /// terminal, and says how to get one over ssh.
    @Test func withoutATerminalNothingIsAskedNorMade() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = directory + "/identity"
        let result = try runTool(["pair", "--identity", identity, "--authorized-peers", directory + "/peers"], input: "y\n")
        #expect(result.status == 64)
        #expect(result.err.contains("standard input must be a terminal"), "\(result.err)")
        #expect(result.err.contains("hint: ") && result.err.contains("ssh -t"), "\(result.err)")
        #expect(!FileManager.default.fileExists(atPath: identity))
    }

    /// L-1: the other host's name is added under one no line carries, as names compare.
    @Test func thePairedNameIsUniqueAsNamesCompare() {
        #expect(PairCommand.uniqueName("cafe\u{0301}", taken: ["caf\u{00E9}"]) == "caf\u{00E9}-2")
        #expect(PairCommand.uniqueName("a/b", taken: ["a_b", "a_b-2"]) == "a/b-3")
        #expect(PairCommand.uniqueName("desk", taken: ["laptop"]) == "desk")
    }

    @Test func theHelpNoLongerSuggestsAnsweringFromAScript() throws {
        let help = try runTool(["pair", "--help"])
        #expect(!help.out.contains("echo y"))
        #expect(help.out.contains("ssh -t"))
    }
}

/// M-1: the question itself, on a pseudo-terminal. The person must type the code the other
/// host shows, after the question appeared.
@Suite struct PairingQuestionTests {
    let candidate = PairingExchange.Candidate(key: HostIdentity(name: "bob").publicKey, name: "bob@desk",
                                              shownCode: "402117", expectedCode: "090512")

    /// Asks on `terminal`, types `answers` one after another, each once the prompt is there.
    func answer(typedAhead: String, _ answers: [String], limit: Duration = .seconds(90)) async throws -> (Bool, String) {
        let terminal = try PseudoTerminal()
        var pipeEnds: [Int32] = [0, 0]
        #expect(pipe(&pipeEnds) == 0)
        defer { close(pipeEnds[0]) }
        try terminal.type(typedAhead)
        let question = PairingQuestion(input: terminal.follower, output: pipeEnds[1], limit: limit)
        let candidate = self.candidate
        async let accepted = question.ask(about: candidate)
        var shown = ""
        for (index, typed) in answers.enumerated() {
            let prompts = index + 1
            while shown.components(separatedBy: "Type the code").count - 1 < prompts {
                // Generous: on a loaded machine other suites' child processes hold the pool.
                let more = await readUntil(pipeEnds[0], contains: "Type the code", within: .seconds(90))
                #expect(!more.isEmpty, "no prompt \(prompts)")
                if more.isEmpty { break }
                shown += more
            }
            try terminal.type(typed)
        }
        let result = await accepted
        close(pipeEnds[1])
        shown += await readUntil(pipeEnds[0], contains: "\u{0}", within: .milliseconds(500))
        return (result, shown)
    }

    /// The right code and a yes, typed before the question: neither is taken. Enter after it
    /// declines.
    @Test func inputTypedBeforeTheQuestionIsNotTaken() async throws {
        let (accepted, shown) = try await answer(typedAhead: "090512\ny\n", ["\n"])
        #expect(!accepted)
        #expect(shown.contains("this host's code: 402 117"))
        #expect(!shown.contains("090"), "the code the other host shows is never shown here")
    }

    @Test func theOtherHostsCodeTypedAfterTheQuestionIsAccepted() async throws {
        let (accepted, _) = try await answer(typedAhead: "", ["090 512\n"])
        #expect(accepted)
    }

    @Test func aYesOrThisHostsOwnCodeIsNotAnAnswerAndThreeMissesDecline() async throws {
        let (accepted, shown) = try await answer(typedAhead: "", ["y\n", "402117\n", "123456\n"])
        #expect(!accepted)
        #expect(shown.contains("2 tries left") && shown.contains("1 try left"))
        #expect(shown.contains("the codes do not match: someone may be interfering"))
    }

    @Test func aMistypeCanBeCorrected() async throws {
        let (accepted, _) = try await answer(typedAhead: "", ["090513\n", "090512\n"])
        #expect(accepted)
    }

    @Test func noAnswerWithinTheLimitDeclines() async throws {
        let started = ContinuousClock.now
        let (accepted, shown) = try await answer(typedAhead: "", [], limit: .milliseconds(300))
        #expect(!accepted)
        #expect(shown.contains("no answer within"))
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}
