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

/// `bletransfer peers`: list and edit the authorized-peers file (`AuthorizedPeersFile` edits; these read and print).
struct PeersCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "peers",
        abstract: "List and edit the authorized-peers file.",
        discussion: HelpText.discussion("""
            Edits keep comments and every other line as they are, and replace the file \
            atomically. Running roles and daemons read the change at their next connection.

            EXAMPLES:
              bletransfer peers list
              bletransfer peers add 'bletransfer-x25519 q2V5…= laptop'
              ssh laptop bletransfer id | bletransfer peers add -
              bletransfer peers fingerprint 'bletransfer-x25519 q2V5…='
              bletransfer peers rename laptop old-laptop
              bletransfer peers remove old-laptop
              sudo bletransfer peers add --authorized-peers \\
                  /etc/bletransfer/authorized-peers 'bletransfer-x25519 …'
            """, manual: """
            The authorized-peers file lists, one line each, the public keys of the hosts this \
            host exchanges messages with, as 'bletransfer id' prints them on each host: \
            'bletransfer-x25519 <base64> [name]'. Lines starting with '#' are comments.

            A peer is named by its name or by its fingerprint (SHA256:…, the whole SHA-256 of \
            the key, as 'bletransfer id' and 'peers list' show it). Before adding a line \
            received from elsewhere, compare 'peers fingerprint' of it with the fingerprint \
            'bletransfer id' shows on the peer itself.

            The file must not be writable by group or others and must belong to you or root, \
            and so must every directory above it (sticky ones such as /tmp aside), as sshd's \
            StrictModes wants; it must not be a symbolic link. Otherwise the roles refuse it \
            (exit 78), and a running role that finds it so refuses every peer until it is fixed.

            Default path: $XDG_CONFIG_HOME/bletransfer/authorized-peers \
            (~/.config/bletransfer/authorized-peers); /etc/bletransfer/authorized-peers for the \
            service user 'bletransfer'.
            """),
        subcommands: [PeersList.self, PeersAdd.self, PeersRemove.self, PeersRename.self, PeersFingerprint.self]
    )
}

/// How the command line compares peer names: NFC, then as the folder a name makes (`outbox/NAME/`,
/// `--folder-per-sender`): two peers never share a folder; a typed name matches the listed one whatever its accents.
enum PeerNames {
    static let folderForm: AuthorizedPeersFile.NameForm = { OutputDirectory.sanitizedFileName($0) ?? $0 }
}

/// `--authorized-peers PATH` of every `peers` command.
struct PeersFileOption: ParsableArguments {
    @Option(name: .customLong("authorized-peers"), help: ArgumentHelp(
        "The file (default: as the roles use).", valueName: "PATH"))
    var authorizedPeers: String?

    func validate() throws {
        if authorizedPeers?.isEmpty == true { throw ValidationError("--authorized-peers: give a file path") }
    }

    var path: String { authorizedPeers ?? IdentityLocation.defaultAuthorizedPeersPathForThisProcess() }
}

/// Reading and writing the file, with failures in the command line's voice.
enum PeersFileAccess {
    /// The file's text and mode; with `missingIsEmpty`, a file not there yet reads as empty.
    static func read(_ path: String, missingIsEmpty: Bool) throws -> (file: AuthorizedPeersFile, mode: mode_t?) {
        do {
            let (text, _) = try AuthorizedPeers.readText(from: path)
            var status = stat()
            let mode = stat(path, &status) == 0 ? mode_t(status.st_mode) & 0o7777 : nil
            return (AuthorizedPeersFile(text: text), mode)
        } catch .fileAccess(_, _, let code) where code == ENOENT && missingIsEmpty {
            return (AuthorizedPeersFile(text: ""), nil)
        } catch { throw bletransfer.exitCode(reporting: IdentityLocation.failure(error), json: false) }
    }

    /// Replaces the file with `file`'s text, keeping its mode (0644 for a new file).
    static func write(_ file: AuthorizedPeersFile, to path: String, mode: mode_t?) throws {
        do {
            try AtomicFile.replace(path: path, contents: file.text, mode: mode ?? 0o644)
        } catch { throw bletransfer.exitCode(reporting: IdentityLocation.failure(error), json: false) }
    }

    /// Reads the file, applies `change` and writes the result back, keeping the file's mode. A refused change fails
    /// the command and leaves the file as it was. Returns what `change` returned and the file as written.
    static func edit<Outcome>(
        _ path: String, missingIsEmpty: Bool,
        _ change: (inout AuthorizedPeersFile) throws(AuthorizedPeersFile.EditError) -> Outcome
    ) throws -> (outcome: Outcome, file: AuthorizedPeersFile) {
        var (peersFile, mode) = try read(path, missingIsEmpty: missingIsEmpty)
        let before = peersFile
        let outcome: Outcome
        do { outcome = try change(&peersFile) } catch { throw fail(error, file: before) }
        // Nothing changed (a key listed already): the file, and its time, stay as they are.
        guard peersFile != before else { return (outcome, peersFile) }
        try write(peersFile, to: path, mode: mode)
        return (outcome, peersFile)
    }

    /// `file`: the file as read, for the nearest name to a name that names nobody.
    static func fail(_ error: AuthorizedPeersFile.EditError, file: AuthorizedPeersFile? = nil) -> ExitCode {
        let kind: FailureKind
        var hint: String?
        switch error {
        case .alreadyListed: kind = .cannotCreate
        case .noMatch(let given):
            kind = .usage
            hint = file.flatMap { $0.entries.isEmpty ? "no authorized peers yet; run 'bletransfer pair'" : nearestPeerHint(given, in: $0) }
        case .ambiguous: kind = .usage
            hint = "give the fingerprint ('bletransfer peers list' shows it)"
        case .malformedLine, .invalidName, .nameTaken: kind = .usage
        }
        return bletransfer.exitCode(reporting: RoleFailure(kind, error.description), json: false, hint: hint)
    }

    /// The key lines given: `line` itself or, for `-` or none, standard input's key lines (at least one).
    static func givenKeyLines(_ line: String?) throws -> [String] {
        guard let line, line != "-" else {
            let keyLines = Array(AnyIterator { readLine(strippingNewline: true) }).filter(isKeyLine)
            guard !keyLines.isEmpty else {
                throw bletransfer.exitCode(reporting: RoleFailure(.noInput, "no public key line on standard input"), json: false)
            }
            return keyLines
        }
        return [line]
    }

    /// Whether an input line may be a key: not blank, not a comment, not the fingerprint line `bletransfer id` prints.
    static func isKeyLine(_ line: String) -> Bool {
        let trimmed = line.trimmingCharacters(in: .whitespaces)
        return !trimmed.isEmpty && !trimmed.hasPrefix("#") && !trimmed.hasPrefix("SHA256:")
    }
}

struct PeersList: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "list", abstract: "List the authorized peers: name, fingerprint, key line.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer peers list
              bletransfer peers list --json | jq -r .fingerprint
              sudo bletransfer peers list --authorized-peers /etc/bletransfer/authorized-peers
            """, manual: """
            One line per peer: its name (- when it has none), its fingerprint and its key line. \
            Before any peer is listed (no file yet, or none in it) it says so on standard error \
            and exits 0.
            """))

    @OptionGroup var file: PeersFileOption

    @Flag(name: .long, help: "One JSON object per peer, one a line.") var json = false

    static let noneYet = "bletransfer: no authorized peers yet; run 'bletransfer pair' on this host and the other "
        + "(or 'bletransfer peers add LINE' with the line 'bletransfer id' prints there)"

    func run() throws {
        let path = file.path
        let (peersFile, _) = try PeersFileAccess.read(path, missingIsEmpty: true)
        guard !peersFile.entries.isEmpty else {
            EventRenderer.writeLine(Self.noneYet, to: 2)
            return
        }
        do {
            _ = try AuthorizedPeers(parsing: peersFile.text, path: path)
        } catch { EventRenderer.writeLine("bletransfer: warning: \(error.description)", to: 2) }
        for entry in peersFile.entries {
            let line = entry.key.line(name: entry.name)
            if json {
                print(PeerListing(fingerprint: entry.key.fingerprint, key: line, line: entry.line, name: entry.name).json)
            } else { print(SafeText.escape("\(entry.name ?? "-")  \(entry.key.fingerprint)  \(line)")) }
        }
    }
}

/// One `peers list --json` line: sorted keys, slashes as they are, `name` left out when none.
struct PeerListing: Encodable {
    var fingerprint: String
    var key: String
    var line: Int
    var name: String?

    var json: String { (try? JSONEncoder.sortedKeys.encode(self)).map { String(decoding: $0, as: UTF8.self) } ?? "{}" }
}

struct PeersAdd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "add", abstract: "Add a public key line ('-': the lines of standard input).",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer peers add 'bletransfer-x25519 q2V5…= laptop'
              ssh laptop bletransfer id | bletransfer peers add -
            """, manual: """
            Compare the line's fingerprint ('bletransfer peers fingerprint LINE') with what \
            'bletransfer id' shows on the peer before adding it. A key listed already is left \
            as it is (exit 0); a malformed line, or a name another line carries, is refused and \
            nothing is added.
            """))

    @Argument(help: ArgumentHelp("'bletransfer-x25519 <base64> [name]', or '-'.", valueName: "LINE")) var line: String

    @OptionGroup var file: PeersFileOption

    enum Added {
        case added(AuthorizedPeersFile.Entry)
        /// Listed already, at this entry: nothing to do.
        case listed(AuthorizedPeersFile.Entry)
    }

    func run() throws {
        let path = file.path
        let given = try PeersFileAccess.givenKeyLines(line)
        // All or nothing: a refused line leaves the file as it was; a key listed already stays, and counts as done.
        let (results, _) = try PeersFileAccess.edit(path, missingIsEmpty: true) { peersFile throws(AuthorizedPeersFile.EditError) in
            try given.map { keyLine throws(AuthorizedPeersFile.EditError) -> Added in
                let (key, _) = try AuthorizedPeersFile.parseGiven(keyLine)
                if let listed = peersFile.entries.first(where: { $0.key == key }) { return .listed(listed) }
                return .added(try peersFile.add(keyLine, form: PeerNames.folderForm))
            }
        }
        for result in results {
            switch result {
            case .added(let entry):
                EventRenderer.writeLine(SafeText.escape("bletransfer: added \(entry.name ?? "a peer") (\(entry.key.fingerprint)) to \(path)"), to: 2)
            case .listed(let entry):
                EventRenderer.writeLine(SafeText.escape("bletransfer: \(entry.name ?? "this key") (\(entry.key.fingerprint)) is listed "
                    + "already, at line \(entry.line) of \(path); nothing changed"), to: 2)
            }
        }
    }
}

struct PeersRemove: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "remove", abstract: "Remove a peer, named by its name or fingerprint.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer peers remove old-laptop
              bletransfer peers remove SHA256:Zom4eu+FtGGybQy0wRCqjPE0mE9V2GmnTQQ5VQWT7H4
            """, manual: """
            Running roles and daemons refuse the peer from their next connection on. A name \
            that names nobody, or several lines, is refused (exit 64).
            """))

    @Argument(help: ArgumentHelp("A name, or a fingerprint (SHA256:…).", valueName: "NAME|FINGERPRINT"))
    var peer: String

    @OptionGroup var file: PeersFileOption

    func run() throws {
        let path = file.path
        // No file yet: nobody to remove, as when it lists others (64, as `send --to` of a stranger).
        let (removed, peersFile) = try PeersFileAccess.edit(path, missingIsEmpty: true) { peersFile throws(AuthorizedPeersFile.EditError) in
            try peersFile.remove(peer, form: PeerNames.folderForm)
        }
        EventRenderer.writeLine(SafeText.escape("bletransfer: removed \(removed.name ?? "a peer") (\(removed.key.fingerprint)) from \(path)"), to: 2)
        if peersFile.entries.isEmpty {
            EventRenderer.writeLine("bletransfer: warning: \(path) lists no peer now; secure roles refuse every peer", to: 2)
        }
    }
}

struct PeersRename: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rename", abstract: "Give a peer, named by its name or fingerprint, a new name.",
        usage: "bletransfer peers rename [<options>] <NAME|FINGERPRINT> <NEWNAME>",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer peers rename laptop old-laptop
              bletransfer peers rename 'bob@desk' desk
            """, manual: """
            The new name is one line of printable text that no other line carries (compared \
            NFC-normalized and as the folder it names: outbox/NAME/), and does not start with \
            SHA256:.
            """))

    @Argument(help: ArgumentHelp("A name, or a fingerprint (SHA256:…).", valueName: "NAME|FINGERPRINT"))
    var peer: String

    @Argument(help: ArgumentHelp("The new name.", valueName: "NEWNAME")) var newName: String

    @OptionGroup var file: PeersFileOption

    func run() throws {
        let path = file.path
        let (before, _) = try PeersFileAccess.read(path, missingIsEmpty: false)
        let (renamed, _) = try PeersFileAccess.edit(path, missingIsEmpty: false) { peersFile throws(AuthorizedPeersFile.EditError) in
            try peersFile.rename(peer, to: newName, form: PeerNames.folderForm)
        }
        let old = before.entries.first { $0.line == renamed.line }?.name
        EventRenderer.writeLine(SafeText.escape("bletransfer: renamed \(old.map { "'\($0)'" } ?? "the peer") "
            + "(\(renamed.key.fingerprint)) to '\(renamed.name ?? newName)' in \(path)"), to: 2)
    }
}

struct PeersFingerprint: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fingerprint",
        abstract: "Print the fingerprint of a public key line (none or '-': standard input's lines).",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer peers fingerprint 'bletransfer-x25519 q2V5…= laptop'
              ssh laptop bletransfer id | bletransfer peers fingerprint
            """, manual: """
            Compare it with the fingerprint 'bletransfer id' shows on the peer itself (read it \
            there, or over the phone) before adding a line that came by mail.
            """))

    @Argument(help: ArgumentHelp("'bletransfer-x25519 <base64> [name]'.", valueName: "LINE")) var line: String?

    func run() throws {
        for keyLine in try PeersFileAccess.givenKeyLines(line) {
            do {
                let (key, name) = try AuthorizedPeersFile.parseGiven(keyLine)
                print(SafeText.escape(name.map { "\(key.fingerprint)  \($0)" } ?? key.fingerprint))
            } catch { throw PeersFileAccess.fail(error) }
        }
    }
}
