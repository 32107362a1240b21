import BlueZ
import Foundation
import Glibc
@testable import Machines
@testable import Roles
@testable import Storage
import Storage
import TestSupport
import Testing
import Transfer
import Trust

/// The authorized-peers file as the roles see it: re-read for each new session; a new text
/// that cannot be used refuses every listed peer until it is fixed (L-4: fails closed).
@Suite struct TrustReloadTests {
    let alice = HostIdentity(name: "alice")
    let bob = HostIdentity(name: "bob")

    @Test func aPolicyFromAFileSeesItsCurrentText() throws {
        try withScratchPeersFile("# both\n\(alice.publicKeyLine)\n\(bob.publicKeyLine)\n", mode: 0o644) { path in
            let policy = try SecureModePolicy(identity: HostIdentity(), authorizedPeersPath: path, requiresSecure: true)
            #expect(policy.authorizedPeers.isAuthorized(alice.publicKey) && policy.authorizedPeers.isAuthorized(bob.publicKey))
            #expect(policy.authenticates)

            // Rewritten without bob (atomically, as `peers remove` does): the next read no longer
            // authorizes him.
            try AtomicFile.replace(path: path, contents: "# alice only\n\(alice.publicKeyLine)\n", mode: 0o644)
            #expect(policy.authorizedPeers.isAuthorized(alice.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))

            // Edited in place to something malformed: nobody is authorized until it is fixed
            // (keeping the last good list would keep alice, whom the edit may have meant to drop).
            let handle = try #require(FileHandle(forWritingAtPath: path))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data("garbage\n".utf8))
            try handle.close()
            #expect(!policy.authorizedPeers.isAuthorized(alice.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))

            // Made writable by others: refused, every peer refused.
            try AtomicFile.replace(path: path, contents: "\(bob.publicKeyLine)\n", mode: 0o666)
            #expect(!policy.authorizedPeers.isAuthorized(alice.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))
            chmod(path, 0o644)
            #expect(policy.authorizedPeers.isAuthorized(bob.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(alice.publicKey))

            // Deleted: every peer refused; put back, its peers count again.
            #expect(unlink(path) == 0)
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))
            try AtomicFile.replace(path: path, contents: "\(bob.publicKeyLine)\n", mode: 0o644)
            #expect(policy.authorizedPeers.isAuthorized(bob.publicKey))
        }
    }

    @Test func aPolicyThatDoesNotRequireKeysStillLetsAnyKeyIn() throws {
        try withScratchPeersFile("\(alice.publicKeyLine)\n", mode: 0o600) { path in
            let policy = try SecureModePolicy(identity: HostIdentity(), authorizedPeersPath: path, requiresSecure: false)
            try AtomicFile.replace(path: path, contents: "\(bob.publicKeyLine)\n", mode: 0o600)
            #expect(policy.authorizedPeers.peer(for: bob.publicKey)?.isListed == true)
            #expect(policy.authorizedPeers.peer(for: alice.publicKey)?.isListed == false)
            #expect(!policy.authenticates)
        }
    }

    @Test func anAddressedPolicyLetsInOnlyItsPeerAndLosesItWithTheFile() throws {
        try withScratchPeersFile("\(alice.publicKeyLine)\n\(bob.publicKeyLine)\n", mode: 0o600) { path in
            // `send --to alice`: bob is listed too, but is not the addressee; not requiring keys
            // otherwise changes nothing (an addressee is always authenticated).
            let policy = try SecureModePolicy(identity: HostIdentity(), authorizedPeersPath: path, requiresSecure: false,
                                              restrictedTo: [alice.publicKey])
            #expect(policy.requiresSecure && policy.authenticates)
            #expect(policy.authorizedPeers.isAuthorized(alice.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(HostIdentity().publicKey))

            // Alice removed from the file: nobody is let in, not even bob.
            try AtomicFile.replace(path: path, contents: "\(bob.publicKeyLine)\n", mode: 0o600)
            #expect(!policy.authorizedPeers.isAuthorized(alice.publicKey))
            #expect(!policy.authorizedPeers.isAuthorized(bob.publicKey))
            // Listed again: let in again.
            try AtomicFile.replace(path: path, contents: "\(bob.publicKeyLine)\n\(alice.publicKeyLine)\n", mode: 0o600)
            #expect(policy.authorizedPeers.peer(for: alice.publicKey)?.name == "alice")
        }
    }

    @Test func aFixedListStaysFixed() {
        var policy = SecureModePolicy(identity: HostIdentity(), authorizedPeers: .listing(alice), requiresSecure: true)
        #expect(policy.authorizedPeers.isAuthorized(alice.publicKey) && policy.authenticates)
        policy.authorizedPeers = .listing(bob)
        #expect(policy.authorizedPeers.isAuthorized(bob.publicKey) && !policy.authorizedPeers.isAuthorized(alice.publicKey))
        #expect(SecureModePolicy(identity: HostIdentity(), authorizedPeers: .listing(alice), requiresSecure: false)
            .authorizedPeers.acceptsAnyKey)
    }

    @Test func rotatingAddressesCannotPushOutAConnectedCentralsHello() {
        var registry = HelloRegistry<DeviceReference>(capacity: 3, lifetime: .seconds(60))
        let start = ContinuousClock.now
        let central = DeviceReference.named("/org/bluez/hci0/dev_00_00_00_00_00_01")
        var connected: Set<DeviceReference> = [central]
        let first = registry.record(.version2(HelloV2(session: 1, offered: [.secure])), from: central, at: start,
                                    isConnected: { connected.contains($0) })
        #expect(first)
        // Another device writes HELLOs from ever new addresses, each connected while it writes.
        var kept = 0
        for index in 0..<50 {
            // It keeps at most two links up: older addresses are gone.
            if index >= 2 {
                connected.remove(DeviceReference.named("/org/bluez/hci0/dev_AA_00_00_00_00_\(String(format: "%02X", index - 2))"))
            }
            let rotating = DeviceReference.named("/org/bluez/hci0/dev_AA_00_00_00_00_\(String(format: "%02X", index))")
            connected.insert(rotating)
            if registry.record(.version2(HelloV2(session: UInt64(100 + index), offered: [.secure])), from: rotating,
                               at: start + .milliseconds(index + 1), isConnected: { connected.contains($0) }) {
                kept += 1
            }
        }
        #expect(registry.entries.count <= 3)
        #expect(registry.hello(from: central, at: start + .seconds(1)).session == 1)
        #expect(kept == 50)
        // All entries connected: a new HELLO is dropped rather than one of theirs.
        var full = HelloRegistry<DeviceReference>(capacity: 2, lifetime: .seconds(60))
        let a = DeviceReference.named("/a"), b = DeviceReference.named("/b"), c = DeviceReference.named("/c")
        let results = [(a, 1), (b, 2), (c, 3), (a, 4)].map { device, session in
            full.record(.version2(HelloV2(session: UInt64(session), offered: [.secure])), from: device, at: start, isConnected: { _ in true })
        }
        // c's HELLO is dropped; replacing a device's own HELLO always works.
        #expect(results == [true, true, false, true])
        #expect(full.hello(from: a, at: start).session == 4 && full.hello(from: c, at: start) == .none)
    }
}

extension SecureModePolicy {
    /// Whether peers are authenticated (only listed keys) or merely encrypted to.
    fileprivate var authenticates: Bool { !authorizedPeers.acceptsAnyKey }
}
