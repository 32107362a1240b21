import Foundation
import Testing
import Trust

#if canImport(Glibc)
import Glibc
#endif

@Suite struct AuthorizedPeersFileTests {
    let laptop = try! PeerKey(rawBytes: [UInt8](0..<32))
    let phone = try! PeerKey(rawBytes: [UInt8](1..<33))
    let tablet = try! PeerKey(rawBytes: [UInt8](2..<34))

    var text: String {
        """
        # the laptop
        \(laptop.line(name: "laptop"))

        not a key line, kept as it is
          \(phone.line(name: "phone"))\t
        # end

        """
    }

    @Test func entriesAreTheWellFormedKeyLines() {
        let file = AuthorizedPeersFile(text: text)
        #expect(file.text == text)
        #expect(file.entries.map(\.line) == [2, 5])
        #expect(file.entries.map(\.name) == ["laptop", "phone"])
        #expect(AuthorizedPeersFile(text: "").entries.isEmpty && AuthorizedPeersFile(text: "").text.isEmpty)
        // A last line without a line break gets one.
        #expect(AuthorizedPeersFile(text: "# x").text == "# x\n")
    }

    @Test func addAppendsAndKeepsEverythingElse() throws {
        var file = AuthorizedPeersFile(text: text)
        let added = try file.add("  \(tablet.line(name: "tablet"))  ")
        #expect(added.line == 7 && added.key == tablet && added.name == "tablet")
        #expect(file.text == text + tablet.line(name: "tablet") + "\n")
        #expect(throws: AuthorizedPeersFile.EditError.alreadyListed(phone.line(name: "other"), line: 5)) {
            try file.add(phone.line(name: "other"))
        }
        #expect {
            try file.add("ssh-ed25519 AAAA me")
        } throws: { error in
            guard case .malformedLine(let line, _) = error as? AuthorizedPeersFile.EditError else { return false }
            return line == "ssh-ed25519 AAAA me"
        }
        #expect(throws: AuthorizedPeersFile.EditError.invalidName("a\u{1B}[2Jb")) {
            try file.add(tablet.line(name: "a\u{1B}[2Jb"))
        }
    }

    @Test func removeByNameOrFingerprint() throws {
        var file = AuthorizedPeersFile(text: text)
        let removed = try file.remove("laptop")
        #expect(removed.key == laptop)
        #expect(!file.text.contains(laptop.base64) && file.text.contains("not a key line, kept as it is"))
        #expect(file.text.hasPrefix("# the laptop\n\nnot a key line"))
        let second = try file.remove(phone.fingerprint)
        #expect(second.name == "phone")
        #expect(file.entries.isEmpty)
        #expect(throws: AuthorizedPeersFile.EditError.noMatch("phone")) { try file.remove("phone") }
    }

    @Test func aNameTwoLinesCarryIsAmbiguous() throws {
        var file = AuthorizedPeersFile(text: laptop.line(name: "x") + "\n" + phone.line(name: "x") + "\n")
        #expect(throws: AuthorizedPeersFile.EditError.ambiguous("x", lines: [1, 2])) { try file.remove("x") }
        let removed = try file.remove(String(phone.fingerprint.dropFirst("SHA256:".count)))
        #expect(removed.line == 2)
    }

    @Test func renameRewritesTheLineInPlace() throws {
        var file = AuthorizedPeersFile(text: text)
        try file.rename("phone", to: "old phone")
        #expect(file.entries.map(\.name) == ["laptop", "old phone"])
        #expect(file.lines[4] == phone.line(name: "old phone"))
        #expect(file.lines.count == AuthorizedPeersFile(text: text).lines.count)
        #expect(throws: AuthorizedPeersFile.EditError.invalidName("")) { try file.rename("laptop", to: "") }
        #expect(throws: AuthorizedPeersFile.EditError.invalidName(" x")) { try file.rename("laptop", to: " x") }
        // What it writes reads back as the same list.
        let peers = try AuthorizedPeers(
            parsing: file.text.replacingOccurrences(of: "not a key line, kept as it is\n", with: ""), path: "p")
        #expect(peers.peer(for: phone)?.name == "old phone")
    }

    @Test func strictModesRefuseAFileOthersCanChange() throws {
        #expect(throws: Never.self) { try AuthorizedPeers.checkOwnership(path: "p", mode: 0o100644, owner: 1000, user: 1000) }
        #expect(throws: Never.self) { try AuthorizedPeers.checkOwnership(path: "p", mode: 0o100600, owner: 0, user: 1000) }
        #expect(throws: TrustError.authorizedPeersUnsafe(path: "p", reason: "is writable by group or others (mode 664)",
                                                          fix: "chmod go-w p")) {
            try AuthorizedPeers.checkOwnership(path: "p", mode: 0o100664, owner: 1000, user: 1000)
        }
        #expect {
            try AuthorizedPeers.checkOwnership(path: "p", mode: 0o100644, owner: 1001, user: 1000)
        } throws: { error in
            guard case .authorizedPeersUnsafe(_, _, let fix) = error as? TrustError else { return false }
            return fix == "chown 1000 p"
        }

        let directory = NSTemporaryDirectory() + "strict-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/authorized-peers"
        try AtomicFile.replace(path: path, contents: laptop.line(name: "laptop") + "\n", mode: 0o644)
        #expect(try AuthorizedPeers.load(from: path).peers.count == 1)
        chmod(path, 0o666)
        #expect {
            try AuthorizedPeers.load(from: path)
        } throws: { error in
            let text = (error as? TrustError)?.description ?? ""
            return text.contains("chmod go-w \(path)") && !text.contains("\n")
        }
    }

    @Test func atomicReplaceKeepsTheModeAskedFor() throws {
        let directory = NSTemporaryDirectory() + "atomic-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/sub/file"
        try AtomicFile.replace(path: path, contents: "one\n", mode: 0o640)
        try AtomicFile.replace(path: path, contents: "two\n", mode: 0o640)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "two\n")
        var status = stat()
        #expect(stat(path, &status) == 0 && status.st_mode & 0o777 == 0o640)
        // No temporary file is left behind.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/sub") == ["file"])
    }

    // MARK: Where the file lies (L-6)

    /// A scratch directory holding an authorized-peers file; the directory's mode as given.
    func withPeersFile(directoryMode: mode_t, _ body: (_ directory: String, _ path: String) throws -> Void) throws {
        let directory = NSTemporaryDirectory() + "peers-place-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer {
            chmod(directory, 0o700)
            try? FileManager.default.removeItem(atPath: directory)
        }
        let path = directory + "/authorized-peers"
        try AtomicFile.replace(path: path, contents: laptop.line(name: "laptop") + "\n", mode: 0o644)
        #expect(chmod(directory, directoryMode) == 0)
        try body(directory, path)
    }

    /// Whoever may write a directory above the file may swap the file: refused, as sshd's
    /// StrictModes does, with the command that fixes it.
    @Test func aFileInADirectoryOthersCanWriteIsRefused() throws {
        try withPeersFile(directoryMode: 0o777) { directory, path in
            #expect(throws: TrustError.authorizedPeersUnsafe(
                path: path, reason: "is in \(directory), which group or others can write (mode 777)",
                fix: "chmod go-w \(directory)")) { _ = try AuthorizedPeers.readText(from: path) }
        }
        try withPeersFile(directoryMode: 0o775) { _, path in
            #expect(throws: TrustError.self) { _ = try AuthorizedPeers.load(from: path) }
        }
    }

    /// A sticky directory (such as /tmp) lets nobody rename or remove another's entry: fine.
    @Test func aStickyDirectoryAboveIsAccepted() throws {
        try withPeersFile(directoryMode: 0o1777) { _, path in
            let peers = try AuthorizedPeers.load(from: path)
            #expect(peers.peers.count == 1)
        }
    }

    /// The file itself as a symbolic link is not followed; a link among the directories above
    /// is resolved and its target checked.
    @Test func aSymbolicLinkIsNotFollowedButADirectoryLinkAboveIsResolved() throws {
        try withPeersFile(directoryMode: 0o755) { directory, path in
            let link = directory + "/link-to-peers"
            #expect(symlink(path, link) == 0)
            #expect(throws: TrustError.authorizedPeersUnsafe(path: link, reason: "is a symbolic link, which is not followed",
                                                             fix: "give the file it points to, or copy it here")) {
                _ = try AuthorizedPeers.readText(from: link)
            }
            let directoryLink = directory + "-link"
            #expect(symlink(directory, directoryLink) == 0)
            defer { unlink(directoryLink) }
            let peers = try AuthorizedPeers.load(from: directoryLink + "/authorized-peers")
            #expect(peers.peers.count == 1)
        }
    }

    // MARK: Names (L-1)

    @Test func namesAreReadComposedAndTwoLinesMayNotShareOne() throws {
        let decomposed = "cafe\u{0301}"
        let (_, name) = try PeerKey.parseLine(Substring(laptop.line(name: decomposed)))
        #expect(name == "caf\u{00E9}")
        let file = AuthorizedPeersFile(text: laptop.line(name: decomposed) + "\n")
        #expect(try file.entry(matching: "caf\u{00E9}").key == laptop)
        #expect(try file.entry(matching: decomposed).key == laptop)
        // Two keys under one name (composed or not) would make an addressee ambiguous.
        let text = laptop.line(name: decomposed) + "\n" + phone.line(name: "caf\u{00E9}") + "\n"
        #expect(throws: TrustError.self) { _ = try AuthorizedPeers(parsing: text, path: "peers") }
    }

    @Test func aNameMayNotReadAsAFingerprintNorBeTakenTwice() throws {
        #expect(!AuthorizedPeersFile.isValidName("SHA256:laptop"))
        #expect(!AuthorizedPeersFile.isValidName("sha256:x"))
        #expect(AuthorizedPeersFile.isValidName("my SHA256: notes"))
        var file = AuthorizedPeersFile(text: laptop.line(name: "laptop") + "\n")
        #expect(throws: AuthorizedPeersFile.EditError.nameTaken("laptop", line: 1)) { try file.add(phone.line(name: "laptop")) }
        #expect(throws: AuthorizedPeersFile.EditError.invalidName("SHA256:x")) { try file.add(phone.line(name: "SHA256:x")) }
        // Compared by the form the caller gives (the command line: as folders).
        let folder: AuthorizedPeersFile.NameForm = { $0.replacingOccurrences(of: "/", with: "_") }
        try file.add(phone.line(name: "a_b"))
        #expect(throws: AuthorizedPeersFile.EditError.nameTaken("a/b", line: 2)) {
            try file.add(tablet.line(name: "a/b"), form: folder)
        }
        #expect(throws: AuthorizedPeersFile.EditError.nameTaken("laptop", line: 1)) { try file.rename("a_b", to: "laptop") }
        // Renaming a peer to its own name is no clash.
        #expect(try file.rename("laptop", to: "laptop").name == "laptop")
    }
}
