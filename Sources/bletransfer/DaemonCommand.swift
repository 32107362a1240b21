import ArgumentParser
import Daemon
import DaemonSupport
import Logging
import Machines
import Options
import Roles
import Storage
import SystemPackage
import Transfer

/// `bletransfer daemon`: either role, unattended, for days.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Receive into a directory, or send an outbox's files, until stopped.",
        discussion: HelpText.discussion("""
            Only with authorized peers ('bletransfer keygen', 'bletransfer id').

            EXAMPLES:
              bletransfer daemon --role receiver --output-dir /srv/inbox
              bletransfer daemon --role sender --outbox /srv/outbox --adapter hci1
            """, manual: """
            --role receiver (a central) scans for senders and stores every message as a new \
            file in --output-dir DIR: written under a hidden name, flushed, then given its \
            final name (message-<UTC time>-<n>.txt, .bin when not text; from a bletransfer sender the \
            sender's file name, sanitized, with its modification time), so a reader of DIR \
            never sees half a message; no file is ever replaced (a taken name gets -1, -2...).

            --role sender (a peripheral) serves the files of --outbox DIR one after the other, \
            oldest modification time first, and moves each into DIR/sent/ once it was \
            delivered: acknowledged by a bletransfer receiver, or, for a peer speaking Apple's \
            plain format, unsubscribed after "EOM". A transfer cut short leaves the file in the \
            outbox, to be sent again. Put files in atomically: write them elsewhere on the same \
            file system (or under a name starting with "." inside DIR), then mv them in. Names \
            starting with "." or ending in .part, .tmp, .swp, "~"... are ignored; empty files \
            and files over --max-size go to DIR/failed/ with a NAME.reason file.

            Only authorized peers: the daemon needs this host's identity ('bletransfer keygen') \
            and an authorized-peers file listing at least one peer's public key line ('bletransfer \
            id' prints it on the peer); it then exchanges messages only with those peers, in the \
            secure mode: both keys authenticated, everything after the handshake encrypted, \
            the outbox released only on an ACK the authorized receiver alone can produce. Any \
            other device in range (Apple's flow, a script, an unlisted key) gets nothing and \
            stores nothing; one log line names its address. --insecure-any-peer restores the \
            plain formats for peers without keys.

            Either role survives the adapter being powered off, removed and plugged back, and \
            bluetoothd restarts: it says so in its log and status, waits, and resumes. So it \
            does when Bluetooth is unavailable at start or the D-Bus policy denies access \
            (state "unauthorized": the log says which group or policy file to change; the \
            daemon retries every 30 s with a new bus connection, so no restart is needed).

            The receiver's resume spool (--spool-dir) defaults to /var/lib/bletransfer/spool for \
            the service user, else as for 'bletransfer receive'.

            Logging goes to standard error, one line per event, with the journal's priority \
            prefix under systemd. Under systemd (Type=notify) the daemon reports READY=1 once \
            its directory is set up, a STATUS= line (state, messages, resident memory), and \
            pings the watchdog at half of WatchdogSec.

            SIGTERM or SIGINT: the transfer under way is abandoned (nothing partial is kept; a \
            file being sent stays in the outbox), advertisement, GATT application and \
            discovery are unregistered, and the daemon exits 0. A directory that cannot be \
            created ends it with 73, one it cannot write into with 77; no identity or no \
            authorized peer (and no --insecure-any-peer) with 78, which systemd is told not to \
            restart. See docs/unattended.md for the systemd units and udev rule.
            """))

    @OptionGroup(title: "Role and directories") var place: DaemonRoleOptions
    @OptionGroup(title: "Peers and trust") var trust: TrustOptions
    @OptionGroup(title: "Peers and trust") var openness: InsecureAnyPeerOption
    @OptionGroup(title: "Bluetooth") var bluetooth: BluetoothOptions
    @OptionGroup(title: "Bluetooth") var advertisedName: AdvertisedNameOption
    @OptionGroup(title: "Bluetooth") var rssi: SignalStrengthOption
    @OptionGroup(title: "Limits") var size: DaemonSizeOption
    @OptionGroup(title: "Limits") var bounds: ReceiverBoundOptions
    @OptionGroup(title: "Limits") var idle: IdleTimeoutOption
    @OptionGroup(title: "Limits") var senderBounds: SenderBoundOptions
    @OptionGroup(title: "Logging") var logging: DaemonLoggingOptions
    @OptionGroup(title: "Advanced") var format: CompatOption
    @OptionGroup(title: "Advanced") var delivery: SenderDeliveryOptions
    @OptionGroup(title: "Advanced") var transport: TransportOptions
    @OptionGroup(title: "Advanced") var spool: SpoolOption

    @Option(name: .customLong("settle-time"), help: ArgumentHelp(
        "Sender: how long a file must stay unchanged before it is read (default 2s).", visibility: .hidden),
            transform: seconds)
    var settleTime: Double?

    @Flag(name: .customLong("no-acquire-notify"), help: ArgumentHelp(
        "Sender: do not offer AcquireNotify (notify through PropertiesChanged).", visibility: .hidden))
    var noAcquireNotify = false

    mutating func validate() throws {
        if format.compat && !openness.insecureAnyPeer {
            throw ValidationError("--compat needs --insecure-any-peer: Apple's format has no secure mode")
        }
        switch place.role {
        case .receiver:
            guard place.outputDirectory != nil else { throw ValidationError("--role receiver needs --output-dir DIR") }
            if place.outbox != nil { throw ValidationError("--outbox is for --role sender; the receiver takes --output-dir") }
            if advertisedName.name != nil {
                throw ValidationError("--name is for --role sender (the receiver does not advertise)")
            }
            if settleTime != nil || noAcquireNotify { throw ValidationError("--settle-time and --no-acquire-notify are for --role sender") }
            if senderBounds.acknowledgementTimeout != nil || senderBounds.unsubscribeTimeout != nil {
                throw ValidationError("--ack-timeout and --unsubscribe-timeout are for --role sender")
            }
            if delivery.valueSize != nil || delivery.compatDelivery != .automatic {
                throw ValidationError("--value-size and --compat-delivery are for --role sender")
            }
        case .sender:
            guard place.outbox != nil else { throw ValidationError("--role sender needs --outbox DIR") }
            if place.outputDirectory != nil {
                throw ValidationError("--output-dir is for --role receiver; the sender takes --outbox")
            }
            if place.folderPerSender { throw ValidationError("--folder-per-sender is for --role receiver") }
            // --min-rate bounds the peer in both roles (the sender: its centrals).
            if rssi.minimumRSSI != nil || idle.idleTimeout != nil || format.compat || bounds.isStorageSet
                || spool.spoolDirectory != nil {
                throw ValidationError(
                    "--min-rssi, --idle-timeout, --compat, --reserve, --quota-bytes, --quota-files and --spool-dir are for --role receiver")
            }
        }
        if place.outputDirectory?.isEmpty == true || place.outbox?.isEmpty == true {
            throw ValidationError("give a directory path, not an empty string")
        }
        try checkingOptions {
            switch place.role {
            case .receiver: try receiverOptions.validate()
            case .sender:
                try senderOptions.validate()
                if let maximumSize = size.maximumSize { _ = try OptionValidation.maximumMessageSizeOption(maximumSize) }
            }
            if let settleTime { _ = try OptionValidation.duration(settleTime, option: "--settle-time", allowZero: true) }
        }
    }

    /// What `daemon --role receiver` takes that `receive` takes too, but the adapter, UUIDs and keys.
    private var receiverOptions: ReceiverOptions {
        bounds.receiverOptions(minimumRSSI: rssi.minimumRSSI, maximumSize: size.maximumSize, idleTimeout: idle.idleTimeout,
                               compat: format.compat)
    }

    /// What `daemon --role sender` shares with `send` (not adapter, UUIDs, keys); `--min-rate` is in both roles.
    private var senderOptions: SenderOptions {
        senderBounds.senderOptions(localName: advertisedName.name ?? PeripheralConfiguration.defaultLocalName,
                                   offersAcquireNotify: !noAcquireNotify, minimumRate: bounds.minimumRate,
                                   delivery: delivery)
    }

    func run() async throws {
        let level = logging.logLevel?.level ?? (logging.verbose ? .debug : .info)
        DaemonLogHandler.bootstrap(logLevel: level)
        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.daemonPolicy(insecureAnyPeer: openness.insecureAnyPeer)
        } catch { throw bletransfer.exitCode(reporting: error, json: logging.json) }
        var settings = DaemonSettings(
            role: place.role, receiver: try bluetooth.targeting(receiverOptions, secureMode: secureMode, transport: transport),
            sender: try bluetooth.targeting(senderOptions, secureMode: secureMode, transport: transport),
            outputDirectory: place.outputDirectory.map { FilePath($0) }, outbox: place.outbox.map { FilePath($0) },
            maximumMessageSize: size.maximumSize ?? Int.max,
            settleTime: settleTime.flatMap { try? OptionValidation.duration($0, option: "--settle-time", allowZero: true) }
                ?? Outbox.defaultSettleTime,
            json: logging.json, version: BLETransferVersion.current)
        settings.folderPerSender = place.folderPerSender
        settings.tunesLink = !bluetooth.noTune
        if place.role == .receiver, !format.compat {
            settings.resumeSpoolDirectory = spool.spoolDirectory ?? IdentityLocation.defaultDaemonSpoolDirectory()
            settings.resumeSpoolIsExplicit = spool.spoolDirectory != nil
        }
        let status = await Daemon(settings: settings).run()
        if status != .success { throw status.exitCode }
    }
}

/// `--role`, and the directory it works in.
struct DaemonRoleOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("What the daemon does.", valueName: "ROLE")) var role: DaemonRoleKind

    @Option(name: .customLong("output-dir"), help: ArgumentHelp(
        "Receiver: store each message as a new file here.", valueName: "DIR"))
    var outputDirectory: String?

    @Option(name: .long, help: ArgumentHelp("Sender: send its files, then move them to DIR/sent/.", valueName: "DIR"))
    var outbox: String?

    @Flag(name: .customLong("folder-per-sender"), help: "Receiver: each sender's files in a folder of its name.")
    var folderPerSender = false
}

/// `--insecure-any-peer`.
struct InsecureAnyPeerOption: ParsableArguments {
    @Flag(name: .customLong("insecure-any-peer"), help: ArgumentHelp(
        "Also serve unlisted keys and Apple's flow (no key)."))
    var insecureAnyPeer = false
}

/// The daemon's `--max-size`, which bounds both roles.
struct DaemonSizeOption: ParsableArguments {
    @Option(name: .customLong("max-size"), help: ArgumentHelp(
        "Largest message received or file sent (default none).", valueName: "BYTES"), transform: bytes)
    var maximumSize: Int?
}

/// `--log-level`, `-v`, `--json` of the daemon.
struct DaemonLoggingOptions: ParsableArguments {
    @Option(name: .customLong("log-level"), help: ArgumentHelp("Least priority logged (default info).", valueName: "LEVEL"))
    var logLevel: DaemonLogLevel?

    @Flag(name: .shortAndLong, help: "Log every step (--log-level debug).") var verbose = false

    @Flag(name: .long, help: "One JSON event per line on standard output.") var json = false

    mutating func validate() throws {
        if json && verbose { throw ValidationError("--json and --verbose cannot be combined") }
        if logLevel != nil && verbose { throw ValidationError("--log-level and --verbose cannot be combined") }
    }
}

/// swift-log levels as `--log-level` takes them.
enum DaemonLogLevel: String, ExpressibleByArgument, CaseIterable {
    case trace, debug, info, notice, warning, error, critical

    var level: Logger.Level { Logger.Level(rawValue: rawValue) ?? .info }
}

extension DaemonRoleKind: ExpressibleByArgument {}
