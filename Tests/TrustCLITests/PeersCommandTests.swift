import Daemon
import enum Daemon.ExitStatus  // Swift Testing has an ExitStatus too
import Foundation
import Testing
import TestSupport
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// Runs the `bletransfer` executable built with the tests with `input` on standard input.
private func runPeers(_ arguments: [String], input: String = "") throws -> BuiltTool.Result {
    try runTool(["peers"] + arguments, input: input)
}

func runTool(_ arguments: [String], input: String = "") throws -> BuiltTool.Result {
    try BuiltTool.run(arguments, input: input)
}

@Suite struct PeersCommandTests {
    let laptop = HostIdentity(name: "laptop")
    let phone = HostIdentity(name: "phone")

    private func withScratchFile(_ body: (_ path: String) throws -> Void) throws {
        let directory = NSTemporaryDirectory() + "peers-cli-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try body(directory + "/authorized-peers")
    }

    @Test func addListRenameRemoveKeepComments() throws {
        try withScratchFile { path in
            let file = ["--authorized-peers", path]
            let added = try runPeers(["add", laptop.publicKeyLine] + file)
            #expect(added.status == 0, "\(added.err)")
            #expect(added.err.contains(laptop.publicKey.fingerprint))
            var status = stat()
            #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o644)
            // A comment the administrator wrote stays where it is.
            let text = try String(contentsOfFile: path, encoding: .utf8)
            try AtomicFile.replace(path: path, contents: "# mine\n" + text, mode: 0o600)
            // What `bletransfer id` prints: the key line, then its fingerprint.
            let fromId = "# from ssh\n\(phone.publicKeyLine)\n\(phone.publicKey.fingerprint)\n"
            #expect(try runPeers(["add", "-"] + file, input: fromId).status == 0)

            // A key listed already: nothing to do, and that is not a failure.
            let before = try String(contentsOfFile: path, encoding: .utf8)
            let again = try runPeers(["add", phone.publicKeyLine] + file)
            #expect(again.status == 0)
            #expect(again.err.contains("listed already, at line 3") && again.err.contains("nothing changed"), "\(again.err)")
            #expect(try String(contentsOfFile: path, encoding: .utf8) == before)
            let bad = try runPeers(["add", "bletransfer-x25519 nope"] + file)
            #expect(bad.status == ExitStatus.usage.rawValue && bad.err.contains("'bletransfer-x25519 nope'"))

            let list = try runPeers(["list"] + file)
            #expect(list.status == 0)
            #expect(list.out == "laptop  \(laptop.publicKey.fingerprint)  \(laptop.publicKeyLine)\n"
                + "phone  \(phone.publicKey.fingerprint)  \(phone.publicKeyLine)\n")
            let json = try runPeers(["list", "--json"] + file).out.split(separator: "\n")
            let first = try #require(JSONSerialization.jsonObject(with: Data(json[0].utf8)) as? [String: Any])
            #expect(first["name"] as? String == "laptop" && first["fingerprint"] as? String == laptop.publicKey.fingerprint)
            #expect(first["key"] as? String == laptop.publicKeyLine && first["line"] as? Int == 2)

            let rename = try runPeers(["rename", "phone", "old phone"] + file)
            #expect(rename.status == 0)
            #expect(rename.err == "bletransfer: renamed 'phone' (\(phone.publicKey.fingerprint)) to 'old phone' in \(path)\n")
            #expect(try runPeers(["remove", laptop.publicKey.fingerprint] + file).status == 0)
            let missing = try runPeers(["remove", "laptop"] + file)
            #expect(missing.status == ExitStatus.usage.rawValue && missing.err.contains("no peer named 'laptop'"))
            let typo = try runPeers(["remove", "old phnoe"] + file)
            #expect(typo.status == ExitStatus.usage.rawValue)
            #expect(typo.err.hasSuffix("hint: did you mean 'old phone'? ('bletransfer peers list' shows the names)\n"), "\(typo.err)")
            let after = try String(contentsOfFile: path, encoding: .utf8)
            #expect(after == "# mine\n\(phone.publicKey.line(name: "old phone"))\n")
            // The mode the file had is kept.
            #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o600)
        }
    }

    /// `send --to` / `receive --from` name a peer of the authorized-peers file; what cannot be
    /// found ends the command before any Bluetooth is touched, with the way to fix it.
    @Test func addressingNamesAListedPeerOrSaysHowToListIt() throws {
        try withScratchFile { path in
            let identity = path + ".identity"
            #expect(try runTool(["keygen", "--identity", identity]).status == 0)
            let trust = ["--authorized-peers", path, "--identity", identity]
            let missing = try runTool(["send", "--to", "laptop", "hi"] + trust)
            #expect(missing.status == ExitStatus.usage.rawValue)
            #expect(missing.err.contains("--to laptop: no authorized peers at \(path)") && missing.err.contains("hint: pair with that host"))
            // The same status as removing a peer nobody listed.
            #expect(try runPeers(["remove", "laptop", "--authorized-peers", path]).status == missing.status)

            #expect(try runPeers(["add", laptop.publicKeyLine, "--authorized-peers", path]).status == 0)
            let unknown = try runTool(["receive", "--from", "desk"] + trust)
            // The same status as `peers remove desk`: a name typed that names nobody.
            #expect(unknown.status == ExitStatus.usage.rawValue)
            #expect(try runPeers(["remove", "desk", "--authorized-peers", path]).status == unknown.status)
            #expect(unknown.err.contains("--from desk: no peer named 'desk'") && unknown.err.contains("peers list"))
            #expect(unknown.err.split(separator: "\n").count == 2 && unknown.err.contains("\nhint: "))
            let typo = try runTool(["send", "--to", "lpatop", "hi"] + trust)
            #expect(typo.status == ExitStatus.usage.rawValue && typo.err.contains("hint: did you mean 'laptop'?"), "\(typo.err)")

            let open = try runTool(["send", "--to", "laptop", "--insecure-any-peer", "hi"] + trust)
            #expect(open.status == ExitStatus.usage.rawValue)
            let compat = try runTool(["receive", "--from", laptop.publicKey.fingerprint, "--compat"])
            #expect(compat.status == ExitStatus.usage.rawValue)
        }
    }

    @Test func fingerprintOfALineFromAnArgumentOrStandardInput() throws {
        let fingerprint = laptop.publicKey.fingerprint
        #expect(try runPeers(["fingerprint", laptop.publicKeyLine]).out == "\(fingerprint)  laptop\n")
        #expect(try runPeers(["fingerprint"], input: laptop.publicKey.line() + "\n").out == "\(fingerprint)\n")
        #expect(fingerprint.count == "SHA256:".count + 43)
        let missing = try runPeers(["remove"])
        #expect(missing.status == ExitStatus.usage.rawValue)
        #expect(missing.err.hasSuffix("\nhint: see 'bletransfer peers remove --help'\n"))
        let bad = try runPeers(["fingerprint", "hello"])
        #expect(bad.status == ExitStatus.usage.rawValue && bad.err.hasPrefix("bletransfer: error: 'hello'"))
    }

    @Test func aFileOthersCanWriteIsRefusedWithTheFix() throws {
        try withScratchFile { path in
            try AtomicFile.replace(path: path, contents: laptop.publicKeyLine + "\n", mode: 0o664)
            let list = try runPeers(["list", "--authorized-peers", path])
            #expect(list.status == ExitStatus.configuration.rawValue)
            #expect(list.err == "bletransfer: error: \(path) is writable by group or others (mode 664); "
                + "run 'chmod go-w \(path)' — whoever can write it can let any key in\n")
            // No file yet is no peer yet: said, exit 0.
            let missing = try runPeers(["list", "--authorized-peers", path + ".none"])
            #expect(missing.status == 0 && missing.err.contains("no authorized peers yet"))
        }
    }

    /// L-1: names compare NFC-normalized and as the folders they make; a name that reads as a
    /// fingerprint is refused; an addressee that names two lines is refused.
    @Test func namesAreOneSpellingUniqueAsFoldersAndNeverAmbiguous() throws {
        try withScratchFile { path in
            let file = ["--authorized-peers", path]
            let decomposed = "cafe\u{0301}"
            #expect(try runPeers(["add", laptop.publicKey.line(name: decomposed)] + file).status == 0)
            // Stored composed; found whichever way it is typed.
            #expect(try String(contentsOfFile: path, encoding: .utf8).contains(laptop.publicKey.line(name: "caf\u{00E9}")))
            #expect(try runPeers(["rename", "caf\u{00E9}", "bureau"] + file).status == 0)
            #expect(try runPeers(["rename", "bureau", decomposed] + file).status == 0)

            // The same name as a folder: "caf\u{00E9}" again, and "a/b" beside "a_b".
            let again = try runPeers(["add", phone.publicKey.line(name: "caf\u{00E9}")] + file)
            #expect(again.status == ExitStatus.usage.rawValue && again.err.contains("is taken, at line 1"), "\(again.err)")
            #expect(try runPeers(["add", phone.publicKey.line(name: "a_b")] + file).status == 0)
            let slash = try runPeers(["add", HostIdentity().publicKey.line(name: "a/b")] + file)
            #expect(slash.status == ExitStatus.usage.rawValue && slash.err.contains("is taken"), "\(slash.err)")

            let fingerprintLike = try runPeers(["rename", "a_b", "SHA256:abc"] + file)
            #expect(fingerprintLike.status == ExitStatus.usage.rawValue && fingerprintLike.err.contains("SHA256:"))

            // Written by hand: two lines whose names make one folder. Addressing either is refused.
            let third = HostIdentity()
            let text = try String(contentsOfFile: path, encoding: .utf8) + third.publicKey.line(name: "a/b") + "\n"
            try AtomicFile.replace(path: path, contents: text, mode: 0o644)
            let identity = path + ".identity"
            #expect(try runTool(["keygen", "--identity", identity]).status == 0)
            let ambiguous = try runTool(["send", "--to", "a_b", "hi", "--identity", identity] + file)
            #expect(ambiguous.status == ExitStatus.usage.rawValue)
            #expect(ambiguous.err.contains("several peers are named 'a_b'"), "\(ambiguous.err)")
        }
    }

    /// Before any pairing, `peers list` says what to do, and that is not a failure.
    @Test func anEmptyListSaysToPairAndExitsZero() throws {
        try withScratchFile { path in
            for arguments in [["list", "--authorized-peers", path], ["list", "--json", "--authorized-peers", path]] {
                let none = try runPeers(arguments)
                #expect(none.status == 0, "\(none.err)")
                #expect(none.out.isEmpty)
                #expect(none.err.contains("no authorized peers yet; run 'bletransfer pair'"))
            }
            try AtomicFile.replace(path: path, contents: "# nobody yet\n", mode: 0o644)
            #expect(try runPeers(["list", "--authorized-peers", path]).err.contains("no authorized peers yet"))
        }
    }
}
