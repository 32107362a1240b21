import Foundation
import PropertyBased
import TestSupport
import Testing

@testable import Trust

@Suite struct IdentityTests {
    @Test func writtenIdentityReadsBackWithMode0600() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/nested/dir/identity"
        let identity = HostIdentity(name: "alice@laptop")
        try identity.write(to: path, replacing: false)

        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let parent = try FileManager.default.attributesOfItem(atPath: directory + "/nested/dir")
        #expect((parent[.posixPermissions] as? Int) == 0o700)

        let loaded = try HostIdentity.load(from: path)
        #expect(loaded.privateKeyBytes == identity.privateKeyBytes)
        #expect(loaded.publicKey == identity.publicKey)
        #expect(loaded.name == "alice@laptop")
        // No temporary file is left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/nested/dir") == ["identity"])
    }

    @Test func anExistingIdentityIsKeptUnlessReplacing() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/identity"
        let first = HostIdentity()
        try first.write(to: path, replacing: false)
        #expect(throws: TrustError.identityExists(path: path)) { try HostIdentity().write(to: path, replacing: false) }
        #expect(try HostIdentity.load(from: path).publicKey == first.publicKey)

        let second = HostIdentity()
        try second.write(to: path, replacing: true)
        #expect(try HostIdentity.load(from: path).publicKey == second.publicKey)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["identity"])
    }

    @Test func aKeyReadableByOthersIsRefused() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/identity"
        try HostIdentity().write(to: path, replacing: false)
        for mode in [0o640, 0o604, 0o644, 0o660] {
            chmod(path, mode_t(mode))
            #expect(throws: TrustError.identityTooOpen(path: path, mode: UInt32(0o100000 | mode))) {
                try HostIdentity.load(from: path)
            }
        }
        chmod(path, 0o400)
        #expect(throws: Never.self) { try HostIdentity.load(from: path) }
        let message = TrustError.identityTooOpen(path: path, mode: 0o100644).description
        #expect(message.contains("644") && message.contains("chmod 600") && !message.contains("\n"))
    }

    @Test func missingAndMalformedFilesSayWhat() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/identity"
        #expect(throws: TrustError.identityMissing(path: path)) { try HostIdentity.load(from: path) }

        let cases: [(String, Int)] = [
            ("", 0),
            ("# only a comment\n", 0),
            ("bletransfer-x25519 AAAA\n", 1),
            ("# c\n\nbletransfer-x25519-private notbase64!\n", 3),
            ("bletransfer-x25519-private AAAA\n", 1),
            ("bletransfer-x25519-private \(Data(count: 32).base64EncodedString())\nbletransfer-x25519-private \(Data(count: 32).base64EncodedString())\n", 2),
        ]
        for (text, line) in cases {
            _ = FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
            #expect {
                try HostIdentity.load(from: path)
            } throws: { error in
                guard case .malformedIdentity(_, let reported, _) = error as? TrustError else { return false }
                return reported == line
            }
        }
    }

    @Test func aNameIsKeptOnOneLine() throws {
        let identity = HostIdentity(name: "two\nlines\r\n  ")
        #expect(identity.name == "two lines")
        #expect(try HostIdentity(parsing: identity.fileContents, path: "x").name == "two lines")
        #expect(HostIdentity(name: " \n ").name == nil)
    }

    @Test func aDirectoryThatCannotBeCreatedIsNamed() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = FileManager.default.createFile(atPath: directory + "/file", contents: Data())
        #expect(throws: TrustError.fileAccess(path: directory + "/file/sub", operation: "create the directory", errno: ENOTDIR)) {
            try HostIdentity().write(to: directory + "/file/sub/identity", replacing: false)
        }
    }

    @Test func theFileIsTextWithThePublicLineInAComment() throws {
        let identity = HostIdentity(name: "host")
        let text = identity.fileContents
        #expect(text.contains("# Its public key line: \(identity.publicKeyLine)\n"))
        #expect(try HostIdentity(parsing: text, path: "x").privateKeyBytes == identity.privateKeyBytes)
    }
}

@Suite struct PeerKeyTests {
    @Test func theLineRoundTripsWithAndWithoutAName() throws {
        let key = HostIdentity().publicKey
        for name in [nil, "laptop", "Alice's phone (kitchen)"] as [String?] {
            let (parsed, parsedName) = try PeerKey.parseLine(Substring(key.line(name: name)))
            #expect(parsed == key)
            #expect(parsedName == name)
        }
    }

    @Test func theFingerprintIsTheWholeHashStableAndDistinct() throws {
        let key = try PeerKey(rawBytes: [UInt8](0..<32))
        // SHA-256 of 00 01 … 1f is 630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd.
        #expect(key.fingerprint == "SHA256:Yw3NKWbEM2aRElRIu7JbT/QSpJxzLbLIq8G4WBvXEN0")
        #expect(key.hasFingerprint(key.fingerprint) && key.hasFingerprint(String(key.fingerprint.dropFirst(7))))
        #expect(!key.hasFingerprint("SHA256:") && !key.hasFingerprint("Yw3NKWbE"))
        #expect(try PeerKey(rawBytes: [UInt8](1..<33)).fingerprint != key.fingerprint)
    }

    @Test func malformedLinesSayWhy() {
        for line in ["", "ssh-ed25519 AAAA", "bletransfer-x25519", "bletransfer-x25519 !!!", "bletransfer-x25519 AAAA"] {
            #expect(throws: TrustError.self) { try PeerKey.parseLine(Substring(line)) }
        }
    }
}

@Suite struct AuthorizedPeersTests {
    @Test func keysNamesCommentsAndBlankLines() throws {
        let laptop = HostIdentity().publicKey
        let phone = HostIdentity().publicKey
        let text = """
            # peers of this host

            \(laptop.line(name: "laptop"))
               \(phone.line())\r
            # end
            """
        let peers = try AuthorizedPeers(parsing: text, path: "peers")
        #expect(peers.peers.count == 2)
        #expect(peers.peer(for: laptop) == .init(key: laptop, name: "laptop", line: 3))
        #expect(peers.peer(for: phone)?.name == nil)
        #expect(peers.isAuthorized(phone))
        #expect(!peers.isAuthorized(HostIdentity().publicKey))
    }

    @Test func everyMalformedLineAndDuplicateIsReportedWithItsNumber() throws {
        let key = HostIdentity().publicKey
        let text = [
            key.line(name: "one"), "garbage", "", key.line(name: "same key again"), "bletransfer-x25519 AAAA",
            "# fine", "bletransfer-x25519",
        ].joined(separator: "\n")
        #expect {
            try AuthorizedPeers(parsing: text, path: "/etc/peers")
        } throws: { error in
            guard case .malformedAuthorizedPeers(let path, let problems) = error as? TrustError else { return false }
            return path == "/etc/peers" && problems.map(\.line) == [2, 4, 5, 7]
                && problems[1].reason == "the key of line 1 again"
        }
        let description = TrustError.malformedAuthorizedPeers(
            path: "p", problems: (1...5).map { AuthorizedPeers.Problem(line: $0, reason: "bad") }
        ).description
        #expect(description == "p: line 1: bad; line 2: bad; line 3: bad; and 2 more")
    }

    @Test func anEmptyFileAuthorizesNobodyAndIsRefusedOnLoad() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/peers"
        _ = FileManager.default.createFile(atPath: path, contents: Data("# nobody yet\n".utf8))
        #expect(throws: TrustError.noAuthorizedPeers(path: path)) { try AuthorizedPeers.load(from: path) }
        #expect(throws: TrustError.fileAccess(path: path + "x", operation: "read", errno: ENOENT)) {
            try AuthorizedPeers.load(from: path + "x")
        }
    }

    @Test func anyListOfKeysRoundTrips() async {
        await propertyCheck(count: 100, input: Gen.uint8().array(of: 32).array(of: 0...20)) { raws throws in
            let keys = try raws.map { raw throws in try PeerKey(rawBytes: raw) }
            let unique = keys.reduce(into: [PeerKey]()) { if !$0.contains($1) { $0.append($1) } }
            let text = unique.enumerated().map { "\($1.line(name: "peer \($0)"))" }.joined(separator: "\n\n")
            let peers = try AuthorizedPeers(parsing: text, path: "p")
            #expect(peers.peers.map(\.key) == unique)
            #expect(peers.peers.map(\.name) == unique.indices.map { "peer \($0)" })
        }
    }
}
