import ArgumentParser
import Daemon
import DaemonSupport
import Logging
import Roles
import SystemPackage
import Transfer

/// `bletransfer daemon`: either role, unattended, for days.
struct DaemonCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "daemon",
        abstract: "Receive into a directory, or send the files of an outbox, until stopped.",
        discussion: """
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

            Logging goes to standard error, one line per event, with the journal's priority \
            prefix under systemd. Under systemd (Type=notify) the daemon reports READY=1 once \
            its directory is set up, a STATUS= line (state, messages, resident memory), and \
            pings the watchdog at half of WatchdogSec.

            SIGTERM or SIGINT: the transfer under way is abandoned (nothing partial is kept; a \
            file being sent stays in the outbox), advertisement, GATT application and \
            discovery are unregistered, and the daemon exits 0. Other exit statuses: 64 usage, \
            74 the directory cannot be created or used, 77 the directory is not writable, \
            78 no identity or no authorized peer (and no --insecure-any-peer). \
            See docs/unattended.md for the systemd units and udev rule.
            """)

    @Option(name: .long, help: ArgumentHelp("receiver or sender.", valueName: "ROLE"))
    var role: DaemonRoleKind

    @Option(name: .customLong("output-dir"), help: ArgumentHelp(
        "Receiver: store each message as a new file in this directory (created if missing).", valueName: "DIR"))
    var outputDirectory: String?

    @Option(name: .long, help: ArgumentHelp(
        "Sender: serve the files of this directory; delivered ones move to DIR/sent/ (created if missing).",
        valueName: "DIR"))
    var outbox: String?

    @Option(name: .long, help: ArgumentHelp(
        "Sender: the local name to advertise (at most \(AdvertisedName.maximumByteCount) bytes of UTF-8).",
        valueName: "LOCALNAME"))
    var name: String?

    @Option(name: .customLong("max-size"), help: ArgumentHelp(
        "Largest message in bytes (default 64 MiB): the receiver refuses larger ones, the sender moves larger files to failed/.",
        valueName: "BYTES"))
    var maximumSize: Int?

    @Option(name: .customLong("min-rssi"), parsing: .unconditional, help: ArgumentHelp(
        "Receiver: ignore senders heard weaker than this, in dBm (e.g. -70).", valueName: "DBM"))
    var minimumRSSI: Int?

    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp(
        "Receiver: drop a transfer when no notification arrives for this many seconds (default 15).",
        valueName: "SECONDS"))
    var idleTimeout: Double?

    @Flag(name: .long, help: "Receiver: do not ask for the framed format (behave like Apple's sample central).")
    var compat = false

    @Option(name: .customLong("log-level"), help: ArgumentHelp(
        "trace, debug, info, notice, warning, error or critical (default info; --verbose: debug).", valueName: "LEVEL"))
    var logLevel: DaemonLogLevel?

    @Option(name: .customLong("settle-time"), help: ArgumentHelp(
        "Sender: seconds a file must stay unchanged before it is read (default 2).", visibility: .hidden))
    var settleTime: Double?

    @Flag(name: .customLong("no-acquire-notify"), help: ArgumentHelp(
        "Sender: do not offer AcquireNotify (notify through PropertiesChanged).", visibility: .hidden))
    var noAcquireNotify = false

    @OptionGroup(title: "Sender: bounds on a central")
    var senderBounds: SenderBoundOptions

    @OptionGroup var bounds: ReceiverBoundOptions

    @OptionGroup(title: "Trust")
    var trust: TrustOptions

    @Flag(name: .customLong("insecure-any-peer"), help: ArgumentHelp(
        "Exchange messages with any peer in range, as Apple's flow and version 1 do: no identity or authorized peers needed. Peers offering the secure mode still get it when keys are there."))
    var insecureAnyPeer = false

    @OptionGroup var common: CommonRoleOptions

    mutating func validate() throws {
        if compat && !insecureAnyPeer {
            throw ValidationError("--compat needs --insecure-any-peer: Apple's format has no secure mode")
        }
        switch role {
        case .receiver:
            guard outputDirectory != nil else { throw ValidationError("--role receiver needs --output-dir DIR") }
            if outbox != nil { throw ValidationError("--outbox is for --role sender; the receiver takes --output-dir") }
            if name != nil { throw ValidationError("--name is for --role sender (the receiver does not advertise)") }
            if settleTime != nil || noAcquireNotify { throw ValidationError("--settle-time and --no-acquire-notify are for --role sender") }
            if senderBounds.acknowledgementTimeout != nil || senderBounds.unsubscribeTimeout != nil {
                throw ValidationError("--ack-timeout and --unsubscribe-timeout are for --role sender")
            }
            if senderBounds.valueSize != nil || senderBounds.compatDelivery != .automatic {
                throw ValidationError("--value-size and --compat-delivery are for --role sender")
            }
        case .sender:
            guard outbox != nil else { throw ValidationError("--role sender needs --outbox DIR") }
            if outputDirectory != nil { throw ValidationError("--output-dir is for --role receiver; the sender takes --outbox") }
            // --min-rate bounds the peer in both roles (the sender: its centrals).
            if minimumRSSI != nil || idleTimeout != nil || compat || bounds.isStorageSet || bounds.spoolDirectory != nil {
                throw ValidationError(
                    "--min-rssi, --idle-timeout, --compat, --reserve, --quota-bytes, --quota-files and --spool-dir are for --role receiver")
            }
        }
        if outputDirectory?.isEmpty == true || outbox?.isEmpty == true {
            throw ValidationError("give a directory path, not an empty string")
        }
        try checkingOptions {
            switch role {
            case .receiver: try receiverOptions.validate()
            case .sender:
                try senderOptions.validate()
                if let maximumSize { _ = try OptionValidation.maximumMessageSizeOption(maximumSize) }
            }
            if let settleTime { _ = try OptionValidation.duration(settleTime, option: "--settle-time", allowZero: true) }
        }
        if common.timeout != nil {
            throw ValidationError("--timeout: a daemon runs until SIGTERM (use timeout(1) or systemd's RuntimeMaxSec=)")
        }
        if logLevel != nil && common.verbose {
            throw ValidationError("--log-level and --verbose cannot be combined")
        }
    }

    /// What `daemon --role receiver` takes that `receive` takes too, but the adapter, UUIDs and keys.
    private var receiverOptions: ReceiverOptions {
        bounds.receiverOptions(minimumRSSI: minimumRSSI, maximumSize: maximumSize, idleTimeout: idleTimeout, compat: compat)
    }

    /// What `daemon --role sender` takes that `send` takes too, but the adapter, UUIDs and keys.
    /// Its `--min-rate` is the one option of both roles.
    private var senderOptions: SenderOptions {
        senderBounds.senderOptions(localName: name ?? PeripheralConfiguration.defaultLocalName,
                                   offersAcquireNotify: !noAcquireNotify, minimumRate: bounds.minimumRate)
    }

    func run() async throws {
        let level = logLevel?.level ?? (common.verbose ? .debug : .info)
        DaemonLogHandler.bootstrap(logLevel: level)
        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.daemonPolicy(insecureAnyPeer: insecureAnyPeer)
        } catch {
            throw bletransfer.exitCode(reporting: error, json: common.json)
        }
        var settings = DaemonSettings(
            role: role, receiver: try common.targeting(receiverOptions, secureMode: secureMode),
            sender: try common.targeting(senderOptions, secureMode: secureMode),
            outputDirectory: outputDirectory.map { FilePath($0) }, outbox: outbox.map { FilePath($0) },
            maximumMessageSize: maximumSize ?? TransferLimits.default.maximumMessageSize,
            settleTime: settleTime.flatMap { try? OptionValidation.duration($0, option: "--settle-time", allowZero: true) }
                ?? Outbox.defaultSettleTime,
            json: common.json, version: BLETransferVersion.current)
        if role == .receiver, !compat {
            settings.resumeSpoolDirectory = bounds.spoolDirectory ?? IdentityLocation.defaultDaemonSpoolDirectory()
            settings.resumeSpoolIsExplicit = bounds.spoolDirectory != nil
        }
        let status = await Daemon(settings: settings).run()
        if status != .success { throw status.exitCode }
    }
}

/// swift-log levels as `--log-level` takes them.
enum DaemonLogLevel: String, ExpressibleByArgument, CaseIterable {
    case trace, debug, info, notice, warning, error, critical

    var level: Logger.Level { Logger.Level(rawValue: rawValue) ?? .info }
}

extension DaemonRoleKind: ExpressibleByArgument {}
