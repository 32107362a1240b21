import Daemon
import enum Daemon.ExitStatus  // Swift Testing has an ExitStatus too
import Foundation
import Testing
import TestSupport
import Trust

@testable import bletransfer

#if canImport(Glibc)
import Glibc
#endif

/// Runs the `bletransfer` executable built with the tests.
private func runCLI(_ arguments: [String], environment: [String: String]? = nil) throws -> BuiltTool.Result {
    try BuiltTool.run(arguments, environment: environment)
}

private func scratchDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "trust-cli-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Runs `body` with the path of an identity file (not created) in a fresh scratch directory,
/// removed afterwards.
private func withScratchIdentity(_ body: (_ path: String) throws -> Void) throws {
    let directory = try scratchDirectory()
    defer { try? FileManager.default.removeItem(atPath: directory) }
    try body(directory + "/identity")
}

@Suite struct IdentityCommandTests {
    @Test func defaultPathsForUsersAndTheServiceUser() {
        #expect(
            IdentityLocation.defaultPath(userName: "bletransfer", environment: ["XDG_CONFIG_HOME": "/x"], homeDirectory: "/h")
                == "/var/lib/bletransfer/identity")
        #expect(
            IdentityLocation.defaultPath(userName: "alice", environment: ["XDG_CONFIG_HOME": "/x/cfg"], homeDirectory: "/h")
                == "/x/cfg/bletransfer/identity")
        #expect(
            IdentityLocation.defaultPath(userName: "alice", environment: [:], homeDirectory: "/home/alice")
                == "/home/alice/.config/bletransfer/identity")
        // A relative XDG_CONFIG_HOME is invalid per the XDG specification and ignored.
        #expect(
            IdentityLocation.defaultPath(userName: "alice", environment: ["XDG_CONFIG_HOME": "cfg"], homeDirectory: "/h")
                == "/h/.config/bletransfer/identity")
    }

    @Test func failuresMapToDistinctExitStatuses() {
        let cases: [(TrustError, ExitStatus)] = [
            (.identityExists(path: "p"), .cannotCreate),
            (.identityMissing(path: "p"), .noInput),
            (.identityTooOpen(path: "p", mode: 0o644), .permissionDenied),
            (.malformedIdentity(path: "p", line: 1, reason: "r"), .configuration),
            (.noAuthorizedPeers(path: "p"), .configuration),
            (.fileAccess(path: "p", operation: "write", errno: EACCES), .permissionDenied),
            (.fileAccess(path: "p", operation: "write", errno: ENOSPC), .ioError),
        ]
        for (error, status) in cases {
            #expect(ExitStatus(IdentityLocation.failure(error).kind) == status)
            #expect(!IdentityLocation.failure(error).userMessage.contains("\n"))
        }
    }

    @Test func keygenThenIdShowTheSameKey() throws {
        try withScratchIdentity { path in
            let created = try runCLI(["keygen", "--identity", path, "--name", "lab host"])
            #expect(created.status == 0)
            let line = created.out.trimmingCharacters(in: .newlines)
            let (key, name) = try PeerKey.parseLine(Substring(line))
            #expect(name == "lab host")
            #expect(created.err.contains(key.fingerprint))
            #expect((try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) == 0o600)

            let shown = try runCLI(["id", "--identity", path])
            #expect(shown.status == 0)
            #expect(shown.out == "\(line)\n\(key.fingerprint)\n")
            #expect(try runCLI(["id", "--identity", path, "--fingerprint"]).out == key.fingerprint + "\n")
        }
    }

    @Test func keygenKeepsAnExistingIdentityUnlessForced() throws {
        try withScratchIdentity { path in
            let first = try runCLI(["keygen", "--identity", path])
            #expect(first.status == 0)

            let again = try runCLI(["keygen", "--identity", path])
            #expect(again.status == ExitStatus.cannotCreate.rawValue)
            #expect(again.out.isEmpty)
            #expect(again.err.hasPrefix("bletransfer: error: \(path) already exists") && again.err.filter { $0 == "\n" }.count == 1)
            #expect(try runCLI(["id", "--identity", path]).out.hasPrefix(first.out))

            let forced = try runCLI(["keygen", "--identity", path, "--force"])
            #expect(forced.status == 0)
            #expect(forced.out != first.out)
            #expect(try runCLI(["id", "--identity", path]).out.hasPrefix(forced.out))
        }
    }

    @Test func idRefusesMissingOpenAndMalformedFiles() throws {
        try withScratchIdentity { path in
            let missing = try runCLI(["id", "--identity", path])
            #expect(missing.status == 66)
            #expect(missing.err == "bletransfer: error: no identity at \(path); create one with 'bletransfer keygen --identity \(path)'\n")

            #expect(try runCLI(["keygen", "--identity", path]).status == 0)
            chmod(path, 0o644)
            let open = try runCLI(["id", "--identity", path])
            #expect(open.status == 77)
            #expect(open.out.isEmpty && open.err.contains("chmod 600"))

            _ = FileManager.default.createFile(atPath: path, contents: Data("not a key\n".utf8), attributes: [.posixPermissions: 0o600])
            chmod(path, 0o600)
            let malformed = try runCLI(["id", "--identity", path])
            #expect(malformed.status == ExitStatus.configuration.rawValue)
            #expect(malformed.err.hasPrefix("bletransfer: error: \(path):1: "))
        }
    }

    @Test func keygenUsesTheXDGDefaultPath() throws {
        guard IdentityLocation.currentUserName() != IdentityLocation.serviceUser else { return }
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var environment = ProcessInfo.processInfo.environment
        environment["XDG_CONFIG_HOME"] = directory
        #expect(try runCLI(["keygen"], environment: environment).status == 0)
        #expect(FileManager.default.fileExists(atPath: directory + "/bletransfer/identity"))
        #expect(try runCLI(["id"], environment: environment).status == 0)
    }
}

/// `--identity`, `--authorized-peers` and `--insecure-any-peer` of the roles, up to the point
/// where Bluetooth would be needed.
@Suite struct TrustOptionTests {
    @Test func authorizedPeersDefaultBesideTheIdentityAndInEtcForTheService() {
        #expect(IdentityLocation.defaultAuthorizedPeersPath(userName: "bletransfer", environment: [:], homeDirectory: "/h")
                == "/etc/bletransfer/authorized-peers")
        #expect(IdentityLocation.defaultAuthorizedPeersPath(userName: "alice", environment: ["XDG_CONFIG_HOME": "/x"],
                                                            homeDirectory: "/h") == "/x/bletransfer/authorized-peers")
        #expect(IdentityLocation.defaultAuthorizedPeersPath(userName: "alice", environment: [:], homeDirectory: "/home/alice")
                == "/home/alice/.config/bletransfer/authorized-peers")
    }

    @Test func daemonRefusesToStartWithoutIdentityOrAuthorizedPeer() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "PATH": "/usr/bin:/bin", "HOME": directory]
        let inbox = directory + "/inbox"

        // No identity at all.
        var run = try runCLI(["daemon", "--role", "receiver", "--output-dir", inbox], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue)
        #expect(run.err.contains("no identity at \(directory)/bletransfer/identity") && run.err.contains("--insecure-any-peer"))
        #expect(run.err.split(separator: "\n").count == 1)

        // An identity, but no authorized-peers file, then one that lists nobody.
        #expect(try runCLI(["keygen"], environment: environment).status == 0)
        run = try runCLI(["daemon", "--role", "receiver", "--output-dir", inbox], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue)
        #expect(run.err.contains("no authorized-peers file at \(directory)/bletransfer/authorized-peers"))
        try "# nobody yet\n".write(toFile: directory + "/bletransfer/authorized-peers", atomically: true, encoding: .utf8)
        run = try runCLI(["daemon", "--role", "sender", "--outbox", directory + "/outbox"], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue)
        #expect(run.err.contains("lists no peer"))

        // A malformed line is a configuration error naming the line, not silently skipped.
        try "not a key\n".write(toFile: directory + "/bletransfer/authorized-peers", atomically: true, encoding: .utf8)
        run = try runCLI(["daemon", "--role", "sender", "--outbox", directory + "/outbox"], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue)
        #expect(run.err.contains("line 1"))
    }

    @Test func interactiveRolesReadTheDefaultTrustFilesWhenTheyExist() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "PATH": "/usr/bin:/bin", "HOME": directory]
        try FileManager.default.createDirectory(atPath: directory + "/bletransfer", withIntermediateDirectories: true)
        // A default authorized-peers file is read as if given: a malformed line is a
        // configuration error naming it, before any Bluetooth is touched.
        try "not a key\n".write(toFile: directory + "/bletransfer/authorized-peers", atomically: true, encoding: .utf8)
        var run = try runCLI(["receive", "--timeout", "1"], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue, "\(run.err)")
        #expect(run.err.contains("authorized-peers") && run.err.contains("line 1"), "\(run.err)")
        run = try runCLI(["send", "--timeout", "1", "hi"], environment: environment)
        #expect(run.status == ExitStatus.configuration.rawValue, "\(run.err)")
        // --insecure-any-peer asks for every peer: the default list is not read.
        run = try runCLI(["send", "--insecure-any-peer", "--timeout", "1", "hi"], environment: environment)
        #expect(run.status != ExitStatus.configuration.rawValue && !run.err.contains("line 1"), "\(run.err)")
        // A well-formed list without this host's identity: it says which file is missing.
        let peer = HostIdentity(name: "peer")
        try (peer.publicKeyLine + "\n").write(toFile: directory + "/bletransfer/authorized-peers", atomically: true,
                                              encoding: .utf8)
        run = try runCLI(["receive", "--timeout", "1"], environment: environment)
        #expect(run.status == ExitStatus.noInput.rawValue, "\(run.err)")
        #expect(run.err.contains("no identity at \(directory)/bletransfer/identity"), "\(run.err)")
        // Apple's flow asked for explicitly: the default files are not read.
        run = try runCLI(["receive", "--compat", "--timeout", "1"], environment: environment)
        #expect(!run.err.contains("no identity"), "\(run.err)")
    }

    @Test func interactiveRolesTakeAnIdentityAloneAndRefuseCompatWithPeers() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ["XDG_CONFIG_HOME": directory, "PATH": "/usr/bin:/bin", "HOME": directory]
        // An identity alone makes this host's key stable (any peer's key is let in); it must exist.
        var run = try runCLI(["receive", "--identity", directory + "/id"], environment: environment)
        #expect(run.status == ExitStatus.noInput.rawValue)
        #expect(run.err.contains("no identity at"))
        run = try runCLI(["send", "--authorized-peers", directory + "/missing", "hi"], environment: environment)
        #expect(run.status == ExitStatus.noInput.rawValue)
        run = try runCLI(["receive", "--compat", "--authorized-peers", directory + "/peers"], environment: environment)
        #expect(run.status == ExitStatus.usage.rawValue)
        run = try runCLI(["daemon", "--role", "receiver", "--output-dir", directory, "--compat"], environment: environment)
        #expect(run.status == ExitStatus.usage.rawValue)
    }
}
