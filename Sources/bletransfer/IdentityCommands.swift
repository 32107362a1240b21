import ArgumentParser
import Daemon
import DaemonSupport
import Foundation
import Machines
import Roles
import Storage
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// Where a host's identity lives without `--identity`; failures reading or writing it as lines with exit statuses.
enum IdentityLocation {
    /// The account the packaged daemons run as (scripts/deb/sysusers.conf).
    static let serviceUser = "bletransfer"
    static let serviceIdentityPath = "/var/lib/bletransfer/identity"

    /// `/var/lib/bletransfer/identity` for the service user; otherwise `$XDG_CONFIG_HOME/bletransfer/identity`, or
    /// `~/.config/bletransfer/identity` when XDG_CONFIG_HOME is unset or not absolute (the XDG base directory spec).
    static func defaultPath(userName: String?, environment: [String: String], homeDirectory: String) -> String {
        if userName == serviceUser { return serviceIdentityPath }
        if let config = environment["XDG_CONFIG_HOME"], config.hasPrefix("/") {
            return config + "/bletransfer/identity"
        }
        return homeDirectory + "/.config/bletransfer/identity"
    }

    static let serviceAuthorizedPeersPath = "/etc/bletransfer/authorized-peers"

    /// `/etc/bletransfer/authorized-peers` for the service user (an administrator's); else beside the default identity.
    static func defaultAuthorizedPeersPath(userName: String?, environment: [String: String], homeDirectory: String) -> String {
        if userName == serviceUser { return serviceAuthorizedPeersPath }
        let identity = defaultPath(userName: userName, environment: environment, homeDirectory: homeDirectory)
        return String(identity.dropLast("identity".count)) + "authorized-peers"
    }

    static func defaultAuthorizedPeersPathForThisProcess() -> String {
        defaultAuthorizedPeersPath(
            userName: currentUserName(), environment: ProcessInfo.processInfo.environment,
            homeDirectory: NSHomeDirectory())
    }

    static func defaultPathForThisProcess() -> String {
        defaultPath(
            userName: currentUserName(), environment: ProcessInfo.processInfo.environment,
            homeDirectory: NSHomeDirectory())
    }

    /// The daemon's spool: /var/lib/bletransfer/spool for the service user (StateDirectory), else receive's default.
    static func defaultDaemonSpoolDirectory() -> String {
        if currentUserName() == serviceUser { return ResumeSpool.serviceDaemonDirectory }
        return ResumeSpool.defaultInteractiveDirectory(environment: ProcessInfo.processInfo.environment,
                                                       homeDirectory: NSHomeDirectory())
    }

    static func currentUserName() -> String? {
        guard let entry = getpwuid(geteuid()), let name = entry.pointee.pw_name else { return nil }
        return String(cString: name)
    }

    /// `user@host`, the name a new key is labelled with unless `--name` says otherwise.
    static func defaultKeyName() -> String {
        "\(currentUserName() ?? "user")@\(ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host")"
    }

    /// The failure, with the exit status a script can tell apart: 64 usage (a malformed key given on the command line),
    /// 66 no identity yet, 73 the identity exists and --force was not given, 74 I/O error, 77 the file is readable by
    /// others or access was denied, 78 a malformed identity or authorized-peers file, or one that lists nobody.
    static func failure(_ error: TrustError) -> RoleFailure {
        let kind: FailureKind
        switch error {
        case .malformedKey: kind = .usage
        case .identityExists: kind = .cannotCreate
        case .identityMissing: kind = .noInput
        case .identityTooOpen: kind = .permissionDenied
        case .malformedIdentity, .malformedAuthorizedPeers, .noAuthorizedPeers, .authorizedPeersUnsafe: kind = .configuration
        case .fileAccess(_, _, let code):
            kind = code == EACCES || code == EPERM || code == EROFS ? .permissionDenied : code == ENOENT ? .noInput : .ioError
        }
        return RoleFailure(kind, error.description)
    }
}

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Create this host's key pair and print its public key line.",
        discussion: HelpText.discussion("""
            Copy the line into the authorized-peers file of every peer that should talk to \
            this host; 'bletransfer id' on a peer prints the line to put here.

            EXAMPLES:
              bletransfer keygen
              sudo -u bletransfer bletransfer id    the service's line
            """, manual: """
            bletransfer hosts recognise each other the way SSH hosts do: each has a Curve25519 \
            key pair (its identity), and each lists the public keys of the hosts it trusts in an \
            authorized-peers file. keygen creates the key pair and prints the public key line.

            The private key is written with mode 0600 (readable by you only), atomically: a \
            crash leaves the old file or the new one, never half of one. An existing identity \
            is kept (exit 73) unless you give --force; replacing it means every peer must be \
            given the new line.

            Default path: $XDG_CONFIG_HOME/bletransfer/identity (~/.config/bletransfer/identity \
            when XDG_CONFIG_HOME is unset); /var/lib/bletransfer/identity when run as the \
            service user 'bletransfer', which the packaged daemons run as. The package and \
            scripts/install-service.sh create the service's key.
            """)
    )

    @Option(name: .long, help: ArgumentHelp("Where to write the private key (default: ~/.config/bletransfer/identity).", valueName: "PATH"))
    var identity: String?

    @Option(name: .long, help: ArgumentHelp("Name shown after the public key (default: user@host).", valueName: "NAME"))
    var name: String?

    @Flag(name: .long, help: "Replace an existing identity (peers will need the new public key line).")
    var force = false

    func validate() throws {
        if let name, name.contains(where: { $0.isNewline || $0 == "\0" }) {
            throw ValidationError("--name: give one line of text")
        }
        if identity?.isEmpty == true { throw ValidationError("--identity: give a file path") }
    }

    /// Creates the identity and returns the public key line.
    static func perform(path: String, name: String, force: Bool) throws(TrustError) -> HostIdentity {
        let identity = HostIdentity(name: name)
        try identity.write(to: path, replacing: force)
        return identity
    }

    func run() throws {
        let path = identity ?? IdentityLocation.defaultPathForThisProcess()
        do {
            let created = try Self.perform(path: path, name: name ?? IdentityLocation.defaultKeyName(), force: force)
            print(created.publicKeyLine)
            EventRenderer.writeLine("bletransfer: identity written to \(path) (fingerprint \(created.publicKey.fingerprint))", to: 2)
        } catch { throw bletransfer.exitCode(reporting: IdentityLocation.failure(error), json: false) }
    }
}

struct IdCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "id",
        abstract: "Print this host's public key line and its fingerprint.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer id                 the line for a peer's authorized-peers file
              bletransfer id --fingerprint   to compare by eye with the peer's
            """, manual: """
            The first line is the public key line to copy into a peer's authorized-peers file \
            (one line per peer, an optional name after the key, '#' comments). The second line \
            is the key's fingerprint, short enough to compare by eye or read aloud: check that \
            the peer's 'bletransfer id' shows the same fingerprint as the line you were given, \
            so nobody swapped the key on its way.

            Default path: as for keygen, $XDG_CONFIG_HOME/bletransfer/identity \
            (~/.config/bletransfer/identity), or /var/lib/bletransfer/identity for the service \
            user 'bletransfer'. An identity readable by group or others is refused (chmod 600 it).
            """)
    )

    @Option(name: .long, help: ArgumentHelp("The identity to show (default: as for keygen).", valueName: "PATH"))
    var identity: String?

    @Flag(name: .long, help: "Print the fingerprint only.") var fingerprint = false

    static func lines(of identity: HostIdentity, fingerprintOnly: Bool) -> [String] {
        fingerprintOnly ? [identity.publicKey.fingerprint] : [identity.publicKeyLine, identity.publicKey.fingerprint]
    }

    func run() throws {
        let path = identity ?? IdentityLocation.defaultPathForThisProcess()
        do {
            let loaded = try HostIdentity.load(from: path)
            // The name comes from its owner's file: still, keep terminal controls and bidi overrides off the screen.
            for line in Self.lines(of: loaded, fingerprintOnly: fingerprint) {
                print(SafeText.escape(line))
            }
        } catch { throw bletransfer.exitCode(reporting: IdentityLocation.failure(error), json: false) }
    }
}
