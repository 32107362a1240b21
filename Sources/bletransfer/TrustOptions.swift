import ArgumentParser
import Foundation
import Machines
import Storage
import Trust

/// `--identity` and `--authorized-peers` of `send`, `receive` and `daemon`: the keys of framed version 2's secure mode
/// (docs/wire-v2.md, docs/trust.md).
struct TrustOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("This host's key (default in ~/.config/bletransfer).", valueName: "PATH"))
    var identity: String?

    @Option(name: .customLong("authorized-peers"), help: ArgumentHelp(
        "Only these keys (default in ~/.config/bletransfer).",
        valueName: "PATH"))
    var authorizedPeers: String?

    func validate() throws {
        if identity?.isEmpty == true { throw ValidationError("--identity: give a file path") }
        if authorizedPeers?.isEmpty == true { throw ValidationError("--authorized-peers: give a file path") }
    }

    /// Interactive `send`/`receive`: the framed protocol is always encrypted. The default identity and
    /// authorized-peers files are used when they exist, exactly as if given (as ssh reads its own files). Without
    /// authorized peers any key is let in and Apple-flow peers are served (an identity alone only makes this host's
    /// key stable, so peers can recognise it); with them, only those keys, and nothing for Apple's flow. `anyPeer`
    /// (`--insecure-any-peer`, `receive --compat`): the default list is not read, and a list given names its keys but
    /// lets in the others too, and Apple's flow.
    ///
    /// `addressing`: the peers of `send --to` / `receive --from` (names or fingerprints from the authorized-peers
    /// file); only they are let in, authenticated, whatever `anyPeer` says.
    func interactivePolicy(anyPeer: Bool = false, addressing: PeerAddressing? = nil) throws(CommandFailure) -> SecureModePolicy? {
        if let addressing, !addressing.peers.isEmpty { return try addressedPolicy(addressing) }
        return try CommandFailure.lifting { () throws(RoleFailure) in try unaddressedPolicy(anyPeer: anyPeer) }
    }

    private func unaddressedPolicy(anyPeer: Bool) throws(RoleFailure) -> SecureModePolicy? {
        let defaultPeers = anyPeer ? nil : Self.existing(IdentityLocation.defaultAuthorizedPeersPathForThisProcess())
        guard let peersPath = authorizedPeers ?? defaultPeers else {
            let defaultIdentity = Self.existing(IdentityLocation.defaultPathForThisProcess())
            guard let identityPath = identity ?? defaultIdentity else { return nil }
            return SecureModePolicy(identity: try Self.loadIdentity(identityPath), authorizedPeers: .anyKey,
                                    requiresSecure: false)
        }
        // The list first: a broken list is the configuration problem to report.
        try Self.checkPeers(peersPath)
        let identityPath = identity ?? IdentityLocation.defaultPathForThisProcess()
        return try Self.policy(identity: try Self.loadIdentity(identityPath), peersPath: peersPath,
                               requiresSecure: !anyPeer)
    }

    /// Only the peers `addressing` names, each found in the authorized-peers file (given or default) by name or
    /// fingerprint; a name the file does not hold ends the command (78) with the way to list or add it.
    private func addressedPolicy(_ addressing: PeerAddressing) throws(CommandFailure) -> SecureModePolicy {
        let peersPath = authorizedPeers ?? IdentityLocation.defaultAuthorizedPeersPathForThisProcess()
        guard FileManager.default.fileExists(atPath: peersPath) else {
            // An unknown peer, as when the file lists others (64): the same status as `peers remove`.
            throw CommandFailure(.usage, "\(addressing.option) \(addressing.peers[0]): no authorized peers at \(peersPath)",
                                 hint: "pair with that host first: 'bletransfer pair' on both hosts (or 'bletransfer peers add' "
                                     + "the line 'bletransfer id' prints there)")
        }
        try CommandFailure.lifting { () throws(RoleFailure) in try Self.checkPeers(peersPath) }
        let file: AuthorizedPeersFile
        do {
            file = AuthorizedPeersFile(text: try AuthorizedPeers.readText(from: peersPath).text)
        } catch { throw CommandFailure(IdentityLocation.failure(error)) }
        var keys = Set<PeerKey>()
        for given in addressing.peers {
            do {
                keys.insert(try file.entry(matching: given, form: PeerNames.folderForm).key)
            } catch {
                // A name typed that names no one, or several: the command line's mistake (64), as for `peers remove`.
                let hint: String? = if case .noMatch = error { nearestPeerHint(given, in: file) } else { nil }
                throw CommandFailure(.usage, "\(addressing.option) \(given): \(error) in \(peersPath)",
                                     hint: hint ?? "'bletransfer peers list' shows the names")
            }
        }
        let identityPath = identity ?? IdentityLocation.defaultPathForThisProcess()
        let loadedIdentity = try CommandFailure.lifting { () throws(RoleFailure) in try Self.loadIdentity(identityPath) }
        do {
            return try SecureModePolicy(identity: loadedIdentity, authorizedPeersPath: peersPath, requiresSecure: true,
                                        restrictedTo: keys)
        } catch { throw CommandFailure(IdentityLocation.failure(error)) }
    }

    /// `daemon`: the secure mode is required; without an identity or an authorized peer the daemon does not start
    /// (exit 78), unless `insecureAnyPeer`. With it, keys that are there serve the peers offering the secure mode.
    func daemonPolicy(insecureAnyPeer: Bool) throws(RoleFailure) -> SecureModePolicy? {
        let identityPath = identity ?? IdentityLocation.defaultPathForThisProcess()
        let peersPath = authorizedPeers ?? IdentityLocation.defaultAuthorizedPeersPathForThisProcess()
        if insecureAnyPeer {
            // Keys only when both were asked for or both exist; a broken file is still an error.
            let wanted = identity != nil || authorizedPeers != nil
            guard wanted || (FileManager.default.fileExists(atPath: identityPath)
                             && FileManager.default.fileExists(atPath: peersPath)) else { return nil }
            let loadedIdentity = try Self.loadIdentity(identityPath)
            return try Self.policy(identity: loadedIdentity, peersPath: peersPath, requiresSecure: false)
        }
        let listPeers = "list each peer's 'bletransfer id' line in \(peersPath), or run with --insecure-any-peer"
        let loadedIdentity: HostIdentity
        do {
            loadedIdentity = try HostIdentity.load(from: identityPath)
        } catch .identityMissing {
            throw RoleFailure(.configuration, "no identity at \(identityPath); the daemon exchanges messages only with "
                + "authorized peers: create this host's key with 'bletransfer keygen --identity \(identityPath)', "
                + listPeers)
        } catch { throw IdentityLocation.failure(error) }
        let advice = "the daemon exchanges messages only with authorized peers: " + listPeers
        do {
            return try SecureModePolicy(identity: loadedIdentity, authorizedPeersPath: peersPath, requiresSecure: true)
        } catch .fileAccess(_, _, let code) where code == ENOENT {
            throw RoleFailure(.configuration, "no authorized-peers file at \(peersPath); \(advice)")
        } catch .noAuthorizedPeers {
            throw RoleFailure(.configuration, "\(peersPath) lists no peer; \(advice)")
        } catch { throw IdentityLocation.failure(error) }
    }

    /// The first line of a run without authorized peers (none given, none at the default path): what that means and how
    /// to change it. Nil when a list is in use, or when `--insecure-any-peer` / `--compat` chose to let anyone in.
    func unauthenticatedNotice(anyPeer: Bool) -> String? {
        let defaultPath = IdentityLocation.defaultAuthorizedPeersPathForThisProcess()
        guard !anyPeer, authorizedPeers == nil, Self.existing(defaultPath) == nil else { return nil }
        return Self.unauthenticated
    }

    /// The one line a run without authorized peers starts with (docs/trust.md says the rest).
    static let unauthenticated = "encrypted, not authenticated: run 'bletransfer pair' on both hosts"

    /// `path` when a file (or anything) is there: a default file is used only when it exists.
    private static func existing(_ path: String) -> String? {
        FileManager.default.fileExists(atPath: path) ? path : nil
    }

    private static func loadIdentity(_ path: String) throws(RoleFailure) -> HostIdentity {
        do { return try HostIdentity.load(from: path) } catch { throw IdentityLocation.failure(error) }
    }

    private static func checkPeers(_ path: String) throws(RoleFailure) {
        do { _ = try AuthorizedPeers.load(from: path) } catch { throw IdentityLocation.failure(error) }
    }

    /// The policy with the authorized peers of `peersPath`, re-read whenever the file changes,
    /// so a peer added with 'bletransfer peers add' counts from the next connection on.
    private static func policy(identity: HostIdentity, peersPath: String,
                               requiresSecure: Bool) throws(RoleFailure) -> SecureModePolicy {
        do {
            return try SecureModePolicy(identity: identity, authorizedPeersPath: peersPath, requiresSecure: requiresSecure)
        } catch { throw IdentityLocation.failure(error) }
    }
}

/// The peers a command is limited to (`send --to`, `receive --from`): names or fingerprints of
/// the authorized-peers file, and the option they came from (for messages).
struct PeerAddressing {
    var option: String
    var peers: [String]
}
