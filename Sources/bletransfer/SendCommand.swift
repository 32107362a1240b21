import ArgumentParser
import Daemon
import BlueZ
import DaemonSupport
import Dispatch
import Logging
import Roles
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#endif

/// `bletransfer send`: the peripheral role.
struct SendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Advertise the transfer service and send a message to the centrals that subscribe.",
        discussion: """
            The message is MESSAGE, the contents of --file PATH, or standard input when neither \
            is given (read to its end, binary-safe). Each central that subscribes gets the \
            message from its first byte: in notifications of at most ATT MTU - 3 bytes and a \
            final "EOM" (Apple's format), or framed with length and SHA-256 when it is a \
            bletransfer receiver that asked for it.

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
            its values may arrive out of order, and the sender says so (see bletransfer status).

            To a bletransfer receiver, --file PATH also sends the file's name (the last component of \
            PATH) and modification time, which a receiver with --output-dir keeps; --no-name \
            sends neither. Apple's format and framed version 1 carry no name.

            An empty message is refused unless --allow-empty is given; a message over 64 MiB \
            is refused (both exit 65). Ctrl-C / SIGTERM unregister everything, then exit 130 / 143.
            """)

    @Argument(help: ArgumentHelp("The message to send (its UTF-8 bytes).", valueName: "MESSAGE"))
    var message: String?

    @Option(name: .long, help: ArgumentHelp("Send the contents of this file.", valueName: "PATH"))
    var file: String?

    @Option(name: .long, help: ArgumentHelp(
        "The local name to advertise (at most \(AdvertisedName.maximumByteCount) bytes of UTF-8).",
        valueName: "LOCALNAME"))
    var name: String = PeripheralConfiguration.defaultLocalName

    @Option(name: .long, help: ArgumentHelp("Exit after the message was delivered this many times.", valueName: "N"))
    var count: Int?

    @Flag(name: .long, help: "Keep serving the message until interrupted.")
    var forever = false

    @Flag(name: .customLong("allow-empty"), help: "Send an empty message instead of refusing it.")
    var allowEmpty = false

    @Flag(name: .customLong("no-name"), help: ArgumentHelp(
        "Do not send the file's name and modification time with --file (sent to bletransfer receivers)."))
    var noName = false

    @Flag(name: .customLong("no-acquire-notify"), help: ArgumentHelp(
        "Do not offer AcquireNotify: notify through PropertiesChanged (no back-pressure).", visibility: .hidden))
    var noAcquireNotify = false

    @OptionGroup(title: "Bounds on a central")
    var bounds: SenderBoundOptions

    @Option(name: .customLong("min-rate"), help: ArgumentHelp(
        "Drop a central that takes the message slower than this many bytes per second, after a 60 s allowance "
            + "(default \(PeripheralConfiguration.defaultMinimumTransferRate); 0: no floor).",
        valueName: "BYTES/S"))
    var minimumRate: Int?

    @OptionGroup(title: "Trust")
    var trust: TrustOptions

    @OptionGroup var common: CommonRoleOptions

    mutating func validate() throws {
        try checkingOptions { try senderOptions.validate() }
        if message != nil && file != nil {
            throw ValidationError("give either MESSAGE or --file PATH, not both")
        }
        try checkingRepetition(count: count, forever: forever)
    }

    /// Everything `send` takes that `daemon --role sender` takes too, but the adapter, UUIDs and keys.
    private var senderOptions: SenderOptions {
        bounds.senderOptions(localName: name, offersAcquireNotify: !noAcquireNotify, minimumRate: minimumRate)
    }

    var input: MessageInput {
        if let message { return .argument(message) }
        if let file { return .file(file) }
        return .standardInput
    }

    func run() async throws {
        let json = common.json
        let limit = TransferLimits.default.maximumMessageSize
        let message: OutgoingMessage
        do {
            message = try input.readMessage(limit: limit, allowEmpty: allowEmpty, sendsName: !noName)
        } catch {
            throw RoleRun.exit(reporting: error, json: json)
        }

        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.interactivePolicy()
        } catch {
            throw RoleRun.exit(reporting: error, json: json)
        }

        let (session, logger) = try await RoleRun.openSession(verbose: common.verbose, json: json)
        defer { session.close() }

        let options = try common.targeting(senderOptions, secureMode: secureMode)
        let peripheral = Peripheral(configuration: options.configuration, session: session, logger: logger)
        let source = RepeatingMessageSource(message: message, count: forever ? nil : (count ?? 1))

        let mode = common.outputMode
        // Unstructured: renders while the role runs in `RoleRun.race`; ends with the event stream and is awaited below.
        let renderer = Task {
            var renderer = EventRenderer(mode: mode)
            for await event in peripheral.events { renderer.render(event) }
            renderer.finish()
        }

        let outcome = await RoleRun.race(timeout: common.timeoutDuration) {
            try await peripheral.run(source: source)
        }
        await renderer.value

        let wanted = forever ? "" : " of \(count ?? 1)"
        try await RoleRun.end(outcome, json: json) { seconds in
            let delivered = await source.deliveredCount
            return "timed out after \(RoleRun.format(seconds)) s with \(delivered)\(wanted) message(s) delivered"
        }
    }
}
