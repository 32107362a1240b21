import ArgumentParser
import BlueZ
import Daemon
import DaemonSupport
import Foundation
import Logging
import Machines
import Options
import Roles
import Synchronization
import Trust

/// `bletransfer pair`: two hosts find each other over BLE, prove their keys, show the same code;
/// when both people confirm it, each adds the other's key line to its authorized-peers file.
struct PairCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pair",
        abstract: "Trust another host: type the code it shows; each adds the other's key.",
        usage: "bletransfer pair [<options>]",
        discussion: HelpText.discussion("""
            Run it on both hosts within the same minute, each in a terminal (a host you reach \
            over ssh: ssh -t HOST bletransfer pair). Each host shows the other's name and \
            fingerprint and a six-digit code of its own; on each host, type the code the \
            OTHER host shows. Then each host's authorized-peers file lists the other, and \
            send, receive and the daemons exchange messages between them, authenticated.

            EXAMPLES:
              bletransfer pair                      on both hosts, then type the other's code
              ssh -t pi bletransfer pair            a headless host, in a terminal over ssh
              sudo bletransfer pair --service       for the packaged daemons' files
            """, manual: """
            The hosts meet over Bluetooth LE (an advertisement of the pairing service and an \
            L2CAP channel), run a Noise XX key exchange between their identities, and derive \
            two codes from it with commitments (as Bluetooth LE Secure Connections' numeric \
            comparison does): each host shows one, and its person types the other host's, as \
            passkey entry asks. Someone in the middle makes the codes agree once in a million \
            tries. A wrong code may be typed again (3 tries); Enter alone, n, or no answer \
            within 2 minutes declines, and a decline on either host adds nothing on either.

            The answer is read from the terminal only, and what was typed before the question \
            appeared is discarded: no script or early keystroke answers for you. Standard \
            input must be a terminal (exit 64 otherwise). A pairing that ends after the key \
            exchange without both answers may be someone interfering: run it again on both \
            hosts.

            A host without an identity gets one first (as 'bletransfer keygen' makes it). \
            --service uses the packaged daemons' files (/var/lib/bletransfer/identity, \
            /etc/bletransfer/authorized-peers); run it as root. Protocol and threat model: \
            docs/pairing.md.

            Exit status: 0 paired; 64 not run in a terminal, or a bad option; 75 no other host \
            found within --timeout, or it fell silent; 77 declined on this host or the other; \
            65 the other host broke the protocol; 69 Bluetooth unavailable; 78 a \
            configuration problem.
            """)
    )

    @Option(name: .long, help: ArgumentHelp(
        "This host's identity (default: ~/.config/bletransfer/identity; made if missing).", valueName: "PATH"))
    var identity: String?

    @Option(name: .customLong("authorized-peers"), help: ArgumentHelp(
        "The file to add the other host to (default: as the roles use).", valueName: "PATH"))
    var authorizedPeers: String?

    @Flag(name: .long, help: "Use the packaged daemons' identity and authorized-peers files (as root).")
    var service = false

    @Option(name: .long, help: ArgumentHelp("Adapter to use (default: the first BlueZ reports).", valueName: "hciN"))
    var adapter: String?

    @Option(name: .long, help: ArgumentHelp(
        "How long to look for the other host (default: 2m; exit 75).", valueName: "TIME"), transform: seconds)
    var timeout: Double = 120

    @Flag(name: .shortAndLong, help: "Print every step on standard error.") var verbose = false

    static let needsTerminal = "pair asks you to type the code the other host shows, so standard input must be "
        + "a terminal; answers from a pipe or a script are not taken"

    /// How long a person may take to compare the codes.
    static let answerTimeout: Duration = .seconds(120)

    func validate() throws {
        if service && (identity != nil || authorizedPeers != nil) {
            throw ValidationError("--service chooses the files; leave out --identity and --authorized-peers")
        }
        if identity?.isEmpty == true { throw ValidationError("--identity: give a file path") }
        if authorizedPeers?.isEmpty == true { throw ValidationError("--authorized-peers: give a file path") }
        if let adapter, !BluetoothOptions.isAdapterName(adapter) {
            throw ValidationError("--adapter: '\(adapter)' is not an adapter name such as hci0")
        }
        // An InvalidOption is the command line's mistake (64), as for send and receive.
        try checkingOptions { _ = try OptionValidation.duration(timeout, option: "--timeout") }
    }

    var identityPath: String {
        service ? IdentityLocation.serviceIdentityPath : identity ?? IdentityLocation.defaultPathForThisProcess()
    }

    var peersPath: String {
        service ? IdentityLocation.serviceAuthorizedPeersPath
            : authorizedPeers ?? IdentityLocation.defaultAuthorizedPeersPathForThisProcess()
    }

    func run() async throws {
        // Before anything is made or touched: the question needs a person at a terminal.
        guard isatty(STDIN_FILENO) == 1 else {
            throw RoleRun.exit(reporting: RoleFailure(.usage, Self.needsTerminal), json: false,
                               hint: "on a host reached over ssh: ssh -t HOST bletransfer pair")
        }
        // A file the roles would refuse is refused before anyone compares codes.
        if FileManager.default.fileExists(atPath: peersPath) {
            do {
                // readText checks the mode and owner, as the roles do.
                _ = try AuthorizedPeers.readText(from: peersPath)
            } catch { throw RoleRun.exit(reporting: IdentityLocation.failure(error), json: false) }
        }
        var logger = Logger(label: "bletransfer") { DaemonLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .warning
        // Bluetooth before the identity: a host that cannot pair gets no key made for it.
        let session = try await RoleRun.openSession(logger: logger, json: false, adapter: adapter)
        defer { session.close() }
        let hostIdentity = try loadOrCreateIdentity()
        let chosenAdapter: Adapter
        do {
            chosenAdapter = try PairingRendezvous.adapter(in: session, named: adapter)
        } catch {
            throw RoleRun.exit(reporting: (error as? RoleFailure) ?? RoleFailure(.unavailable, "\(error)"), json: false)
        }
        let name = hostIdentity.name ?? IdentityLocation.defaultKeyName()
        let limit = try OptionValidation.duration(timeout, option: "--timeout")
        say("pairing as \(name) (\(hostIdentity.publicKey.fingerprint)); run 'bletransfer pair' on the other host "
            + "now (looking for \(RoleRun.format(timeout)) s)")
        let rendezvous = PairingRendezvous(session: session, adapter: chosenAdapter) { say($0) }
        let outcome = Mutex<PairingExchange.Result?>(nil)
        let ended = await RoleRun.run(timeout: nil, stopping: .byCancellation) {
            let result = try await meetAndPair(rendezvous, within: limit, identity: hostIdentity, name: name)
            outcome.withLock { $0 = result }
        }
        try await RoleRun.end(ended, json: false, adapter: adapter, timedOut: { _ in "" })
        guard let result = outcome.withLock({ $0 }) else {
            throw RoleRun.exit(reporting: RoleFailure(.software, "pairing ended without a result"), json: false)
        }
        switch result {
        case .paired(let candidate): try add(candidate)
        case .declined(let here, let byPeer):
            let who = here && byPeer ? "on both hosts" : here ? "on this host" : "on the other host"
            // The other host's "no" is also what someone in the middle answers for it.
            let note = here ? "" : " (if nobody declined there, someone may be interfering: pair again, close together)"
            throw RoleRun.exit(reporting: RoleFailure(.permissionDenied, "pairing declined \(who); nothing added\(note)"),
                               json: false)
        }
    }

    /// Meets the other host and runs the pairing. A channel on which nothing at all came back is given up for a
    /// fresh one while `limit` lasts (`PairingConversation.Unanswered`); anything else ends the pairing.
    private func meetAndPair(_ rendezvous: PairingRendezvous, within limit: Duration, identity: HostIdentity,
                             name: String) async throws -> PairingExchange.Result {
        let deadline = ContinuousClock.now + limit
        var unanswered: PairingConversation.Unanswered?
        while true {
            let meeting: PairingRendezvous.Meeting
            do {
                meeting = try await rendezvous.meet(within: unanswered == nil ? limit : deadline - .now)
            } catch let failure as RoleFailure where failure.kind == .timedOut {
                // After a silent channel, what went wrong then says more than the second search.
                throw unanswered?.failure ?? failure
            }
            let ended: Result<PairingExchange.Result, any Error>
            do {
                ended = .success(try await PairingConversation.run(
                    meeting, identity: identity, name: name, answerTimeout: Self.answerTimeout,
                    ask: { candidate in
                        await PairingQuestion(input: STDIN_FILENO, output: STDERR_FILENO, limit: Self.answerTimeout)
                            .ask(about: candidate)
                    }))
            } catch { ended = .failure(error) }
            meeting.socket.close()
            await rendezvous.forget(meeting)
            guard case .failure(let silence as PairingConversation.Unanswered) = ended else { return try ended.get() }
            guard ContinuousClock.now < deadline else { throw silence.failure }
            // Nothing was exchanged: a fresh channel, within what is left of the limit.
            say("\(meeting.peerDescription) did not answer on that channel; trying a new one")
            unanswered = silence
        }
    }

    /// The identity at `identityPath`, made first when missing (not for `--service`: the package makes the service's).
    private func loadOrCreateIdentity() throws -> HostIdentity {
        do {
            return try HostIdentity.load(from: identityPath)
        } catch .identityMissing where !service {
            do {
                let created = try KeygenCommand.perform(path: identityPath, name: IdentityLocation.defaultKeyName(), force: false)
                say("made this host's identity at \(identityPath)")
                return created
            } catch { throw RoleRun.exit(reporting: IdentityLocation.failure(error), json: false) }
        } catch { throw RoleRun.exit(reporting: IdentityLocation.failure(error), json: false) }
    }

    /// Adds the paired host's key line, under a name no other line of the file carries.
    private func add(_ candidate: PairingExchange.Candidate) throws {
        var (file, mode) = try PeersFileAccess.read(peersPath, missingIsEmpty: true)
        if let listed = file.entries.first(where: { $0.key == candidate.key }) {
            say("paired with \(listed.name ?? candidate.name ?? "the other host") (\(candidate.key.fingerprint)); "
                + "\(peersPath) already lists it (line \(listed.line))")
            return
        }
        let name = Self.uniqueName(candidate.name ?? "peer", taken: Set(file.entries.compactMap(\.name)))
        do {
            try file.add(candidate.key.line(name: name), form: PeerNames.folderForm)
        } catch { throw PeersFileAccess.fail(error) }
        try PeersFileAccess.write(file, to: peersPath, mode: mode)
        say("paired with \(name) (\(candidate.key.fingerprint)); added to \(peersPath)")
    }

    /// `wanted` (NFC), or `wanted-2`, `wanted-3`…: the first no name of `taken` equals (``PeerNames/folderForm``).
    static func uniqueName(_ wanted: String, taken: Set<String>) -> String {
        let forms = Set(taken.map { PeerNames.folderForm(AuthorizedPeersFile.nfc($0)) })
        let base = AuthorizedPeersFile.nfc(wanted)
        func isFree(_ name: String) -> Bool { !forms.contains(PeerNames.folderForm(name)) }
        guard !isFree(base) else { return base }
        var index = 2
        while !isFree("\(base)-\(index)") { index += 1 }
        return "\(base)-\(index)"
    }

    private func say(_ line: String) { EventRenderer.writeLine(SafeText.escape("bletransfer: \(line)"), to: 2) }
}
