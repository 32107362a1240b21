import ArgumentParser
import Daemon
import BlueZ
import DaemonSupport
import Logging
import Machines
import Options
import Roles
import Storage
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#endif

/// `bletransfer send`: the peripheral role.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Advertise the transfer service and send a message to centrals.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer send "hello"                  send one message, then exit
              bletransfer send -f photo.jpg --count 2   a file (with its name), twice
              bletransfer send --to laptop -f notes.txt only to the peer listed as laptop
              tar c docs | bletransfer send -q --timeout 5m
            """, manual: """
            The message is MESSAGE, the contents of --file PATH, or standard input when neither \
            is given (read to its end, binary-safe). Each central that subscribes gets the \
            message from its first byte: in notifications of at most ATT MTU - 3 bytes and a \
            final "EOM" (Apple's format), or in framed records, encrypted, when it is a \
            bletransfer receiver.

            A message counts as delivered when the receiver acknowledged it (framed), or \
            unsubscribed after "EOM" was written (Apple's format; "written" means accepted by \
            bluetoothd's notification socket). A central that leaves earlier gets nothing \
            counted, and the next one starts from byte 0. One central is served at a time \
            (BlueZ keeps one notification session per characteristic); advertising pauses \
            meanwhile. If the adapter is powered off or bluetoothd restarts, the transfer under \
            way is dropped and serving resumes when Bluetooth is back.

            A central that holds the sender is dropped (disconnected; nothing counted) and the \
            next one is served: no ACK within --ack-timeout of "EOM", no unsubscription within \
            --unsubscribe-timeout, or slower than --min-rate. Apple's format has no sequence \
            numbers: on a link with Enhanced ATT bearers (BlueZ's default of 3 GATT channels) \
            its values may arrive out of order.

            --compat-delivery auto (the default) then sends indications, each confirmed before \
            the next; notify sends notifications as Apple's sample does, indicate always \
            indications.

            To a bletransfer receiver, --file PATH also sends the file's name (the last component \
            of PATH) and modification time, which a receiver storing into a directory keeps; --no-name \
            sends neither. Apple's format carries no name.

            A file of any size is read from disk as it goes; standard input (or a FIFO) of any \
            size is read to its end first into an unnamed temporary file in $TMPDIR (else \
            /var/tmp), then sent from it the same way. An empty message is refused unless \
            --allow-empty is given (exit 65). Ctrl-C / SIGTERM unregister everything, then exit \
            130 / 143.
            """))

    @Argument(help: ArgumentHelp("The message to send (its UTF-8 bytes).", valueName: "MESSAGE")) var message: String?

    @OptionGroup(title: "Input and output") var inputOptions: SendInputOptions
    @OptionGroup(title: "Input and output") var reporting: ReportingOptions
    @OptionGroup(title: "Peers and trust") var trust: TrustOptions
    @OptionGroup(title: "Peers and trust") var openness: InsecureAnyPeerOption
    @OptionGroup(title: "Peers and trust") var addressee: ToPeerOption
    @OptionGroup(title: "Bluetooth") var bluetooth: BluetoothOptions
    @OptionGroup(title: "Bluetooth") var advertisedName: AdvertisedNameOption
    @OptionGroup(title: "Limits") var timeout: TimeoutOption
    @OptionGroup(title: "Limits") var rate: SenderRateOption
    @OptionGroup(title: "Limits") var bounds: SenderBoundOptions
    @OptionGroup(title: "Advanced") var delivery: SenderDeliveryOptions
    @OptionGroup(title: "Advanced") var transport: TransportOptions

    @Flag(name: .customLong("no-acquire-notify"), help: ArgumentHelp(
        "Do not offer AcquireNotify: notify through PropertiesChanged (no back-pressure).", visibility: .hidden))
    var noAcquireNotify = false

    mutating func validate() throws {
        try checkingOptions { try senderOptions.validate() }
        if !addressee.to.isEmpty && openness.insecureAnyPeer {
            throw ValidationError("--to sends only to that authorized peer: it cannot be combined with --insecure-any-peer")
        }
        if message != nil && !inputOptions.file.isEmpty {
            throw ValidationError("give either MESSAGE or --file PATH, not both")
        }
        try checkingRepetition(count: inputOptions.count, forever: inputOptions.forever)
        if sendsFileSet {
            if inputOptions.count != nil || inputOptions.forever {
                throw ValidationError("--count and --forever repeat one message; several files or a directory go once each")
            }
            if inputOptions.noName { throw ValidationError("--no-name is for one file: the files of a tree or a list are told apart by their names") }
        }
    }

    /// Everything `send` takes that `daemon --role sender` takes too, but the adapter, UUIDs and keys.
    private var senderOptions: SenderOptions {
        bounds.senderOptions(localName: advertisedName.name ?? PeripheralConfiguration.defaultLocalName,
                             offersAcquireNotify: !noAcquireNotify, minimumRate: rate.minimumRate, delivery: delivery)
    }

    var input: MessageInput {
        if let message { return .argument(message) }
        if let file = inputOptions.file.first { return .file(file) }
        return .standardInput
    }

    /// Several `--file` paths, or one that is a directory: each file goes once, named.
    var sendsFileSet: Bool {
        var status = stat()
        return inputOptions.file.count > 1
            || (inputOptions.file.count == 1 && stat(inputOptions.file[0], &status) == 0 && status.st_mode & S_IFMT == S_IFDIR)
    }

    func run() async throws {
        if sendsFileSet { return try await runFileSet() }
        let json = reporting.json
        let count = inputOptions.count, forever = inputOptions.forever
        let limit = TransferLimits.default.maximumMessageSize
        let message: OutgoingMessage
        do {
            message = try input.readMessage(limit: limit, allowEmpty: inputOptions.allowEmpty, sendsName: !inputOptions.noName)
        } catch { throw RoleRun.exit(reporting: error, json: json) }

        let source = RepeatingMessageSource(message: message, count: forever ? nil : (count ?? 1))
        let wanted = forever ? "" : " of \(count ?? 1)"
        _ = try await serve(source, label: inputOptions.file.first.map { FilePath($0).lastComponent?.string ?? $0 }) { seconds in
            let delivered = await source.deliveredCount
            return "timed out after \(RoleRun.format(seconds)) s with \(delivered)\(wanted) message(s) delivered"
        }
    }

    /// The trust policy, a session and a peripheral serving `source`, its events rendered, until the source is
    /// exhausted, the deadline passes (one line, 75 — `timedOut` words it) or a signal stops it. `notes` are logged
    /// once the session is open. Returns the logger, for what the caller still has to say.
    private func serve(_ source: some MessageSource, label: String?, notes: [String] = [],
                       timedOut: (Double) async -> String) async throws -> Logger {
        let json = reporting.json
        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.interactivePolicy(anyPeer: openness.insecureAnyPeer,
                                                     addressing: PeerAddressing(option: "--to", peers: addressee.to))
        } catch { throw RoleRun.exit(reporting: error, json: json) }
        let (session, logger) = try await RoleRun.openSession(reporting: reporting, adapter: bluetooth.adapter)
        defer { session.close() }
        // Once Bluetooth can be used: a run that cannot start is told its reason alone.
        if addressee.to.isEmpty, let notice = trust.unauthenticatedNotice(anyPeer: openness.insecureAnyPeer) {
            reporting.warn(notice)
        }
        for note in notes { logger.warning("\(note)") }

        let options = try bluetooth.targeting(senderOptions, secureMode: secureMode, transport: transport)
        let peripheral = Peripheral(configuration: options.configuration, session: session, logger: logger)
        let mode = reporting.outputMode
        let link = RoleRun.LinkedEvents(role: peripheral.events, adapter: bluetooth.adapter, tune: !bluetooth.noTune)
        let outcome = await RoleRun.run(timeout: timeout.duration, link: link, rendering: {
            var renderer = EventRenderer(mode: mode, label: label)
            for await event in link.stream { renderer.render(event) }
            renderer.finish()
        }) {
            try await peripheral.run(source: source)
        }
        try await RoleRun.end(outcome, json: json, adapter: bluetooth.adapter, timedOut: timedOut)
        return logger
    }

    /// `send --file A --file DIR…`: each file once, in order, named (tree files by path), in the fewest sessions.
    private func runFileSet() async throws {
        let json = reporting.json
        let limit = TransferLimits.default.maximumMessageSize
        let set: FileSet
        do {
            set = try FileSet.collect(inputOptions.file, limit: limit)
        } catch { throw RoleRun.exit(reporting: error, json: json) }
        let source = FileSetSource(set: set, limit: limit)
        let total = set.entries.count
        let logger = try await serve(source, label: "\(total) files", notes: set.notes) { seconds in
            let delivered = await source.deliveredCount
            return "timed out after \(RoleRun.format(seconds)) s with \(delivered) of \(total) file(s) delivered"
        }
        let problems = await source.problems
        if let last = problems.last {
            for problem in problems.dropLast() { logger.error("\(problem)") }
            throw RoleRun.exit(reporting: RoleFailure(.noInput, last + " (\(problems.count) file(s) not sent)"), json: json)
        }
    }
}

/// Where `send`'s message comes from and how often it goes.
struct SendInputOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: ArgumentHelp(
        "Send this file (and its name), or a directory's tree; repeatable.", valueName: "PATH"))
    var file: [String] = []

    @Flag(name: .customLong("allow-empty"), help: "Send an empty message instead of refusing it.")
    var allowEmpty = false

    @Flag(name: .customLong("no-name"), help: "With --file: do not send the file's name and time.") var noName = false

    @Option(name: .long, help: ArgumentHelp("Exit after this many deliveries (default 1).", valueName: "N"))
    var count: Int?

    @Flag(name: .long, help: "Keep serving the message until interrupted.") var forever = false
}

/// `send --min-rate`: the bound on a central during a transfer.
struct SenderRateOption: ParsableArguments {
    @Option(name: .customLong("min-rate"), help: ArgumentHelp(
        "Drop slower centrals after 60s (default \(PeripheralConfiguration.defaultMinimumTransferRate), 0: off).",
        valueName: "BYTES/S"), transform: bytes)
    var minimumRate: Int?
}

/// `send --to`: only to these authorized peers.
struct ToPeerOption: ParsableArguments {
    @Option(name: .customLong("to"), help: ArgumentHelp(
        "Only to this authorized peer (name or fingerprint; repeatable).", valueName: "PEER"))
    var to: [String] = []
}
