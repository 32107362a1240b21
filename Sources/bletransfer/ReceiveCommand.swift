import ArgumentParser
import Daemon
import BlueZ
import DaemonSupport
import Foundation
import Logging
import Roles
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#endif

/// `bletransfer receive`: the central role.
struct ReceiveCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "receive",
        abstract: "Scan for a sender, subscribe, and receive messages.",
        discussion: """
            Scans for the transfer service, connects to the first peripheral that offers it, \
            subscribes to the transfer characteristic and collects notifications until "EOM", \
            then unsubscribes, disconnects and scans again for the next message. Only a whole \
            message is ever written: a transfer cut short (peer gone, silent for --idle-timeout \
            seconds, Bluetooth switched off) is dropped and tried again.

            Output: without --output or --output-dir the message goes to standard output, byte \
            for byte (several messages one after another, nothing in between). --output PATH \
            replaces PATH atomically with the one message. --output-dir DIR stores each message \
            in a new file (message-<UTC time>-<n>.txt or .bin), atomically, never overwriting; \
            a file a secure sender named keeps its name (sanitized, -1, -2... before the \
            extension when taken) and modification time. --output and standard output ignore names.

            Bounds: a transfer slower than --min-rate (after its first 20 s) is dropped and its \
            sender backs off; with --output-dir, a message is refused before it is received \
            unless --reserve bytes stay free after it and the directory stays within \
            --quota-bytes/--quota-files. A refused message is not acknowledged: its sender keeps \
            it. Each refusal is one line (a "refused" event with --json).

            Terminal: a message written to standard output on a terminal shows control \
            characters escaped (\\x1b...) and bytes that are not UTF-8 as U+FFFD; a pipe or file \
            gets the exact bytes.

            Formats: before subscribing, receive asks the peripheral for the framed format \
            (length + SHA-256, acknowledged after verification); a peer that does not answer it \
            (Apple's sample, other tools) is read in Apple's format: chunks, then "EOM". \
            --compat never asks.

            --json prints one event per line on standard output; with no output option, the \
            "received" event carries the message: "base64" always, "text" when it is valid UTF-8.

            Bluetooth states: no bluetoothd, no adapter, no LE support or an access-denying D-Bus \
            policy at start end the command at once (69, or 77 when denied). A powered-off \
            adapter is waited for (a hint is printed); so is an adapter or bluetoothd that goes \
            away later: work resumes when it is back. --timeout bounds the whole run (75).

            Exit statuses: 0 all messages received, 64 usage, 65 a message failed verification \
            (nothing written), 69 Bluetooth unavailable, 74 output could not be written, \
            75 timed out, 77 permission denied, 130/143 interrupted.
            """)

    @Option(name: .long, help: ArgumentHelp("Write the message to this file (replaced atomically).", valueName: "PATH"))
    var output: String?

    @Option(name: .customLong("output-dir"), help: ArgumentHelp(
        "Write each message to a new file in this directory (created if missing).", valueName: "DIR"))
    var outputDirectory: String?

    @Option(name: .long, help: ArgumentHelp("Exit after this many messages (default 1).", valueName: "N"))
    var count: Int?

    @Flag(name: .long, help: "Keep receiving until interrupted.")
    var forever = false

    @Option(name: .customLong("min-rssi"), parsing: .unconditional, help: ArgumentHelp(
        "Ignore peripherals heard weaker than this, in dBm (e.g. -70).", valueName: "DBM"))
    var minimumRSSI: Int?

    @Option(name: .customLong("max-size"), help: ArgumentHelp(
        "Refuse messages larger than this many bytes (default 64 MiB).", valueName: "BYTES"))
    var maximumSize: Int?

    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp(
        "Drop a transfer when no notification arrives for this many seconds (default 15).", valueName: "SECONDS"))
    var idleTimeout: Double?

    @Flag(name: .long, help: "Do not ask for the framed format: behave exactly like Apple's sample central.")
    var compat = false

    @OptionGroup var bounds: ReceiverBoundOptions

    @OptionGroup(title: "Trust")
    var trust: TrustOptions

    @OptionGroup var common: CommonRoleOptions

    mutating func validate() throws {
        if compat && trust.authorizedPeers != nil {
            throw ValidationError("--compat and --authorized-peers cannot be combined: Apple's format has no secure mode")
        }
        if bounds.isStorageSet && outputDirectory == nil {
            throw ValidationError("--reserve, --quota-bytes and --quota-files are for --output-dir DIR")
        }
        if output != nil && outputDirectory != nil {
            throw ValidationError("give either --output or --output-dir, not both")
        }
        try checkingRepetition(count: count, forever: forever)
        if output != nil && (forever || (count ?? 1) > 1) {
            throw ValidationError("--output holds one message; use --output-dir DIR with --count or --forever")
        }
        try checkingOptions { try receiverOptions.validate() }
    }

    /// Everything `receive` takes that `daemon --role receiver` takes too, but the adapter,
    /// UUIDs and keys.
    private var receiverOptions: ReceiverOptions {
        bounds.receiverOptions(minimumRSSI: minimumRSSI, maximumSize: maximumSize, idleTimeout: idleTimeout, compat: compat)
    }

    func run() async throws {
        let json = common.json
        let started = ContinuousClock.now
        // A closed pipe must be an error we report (exit 74), not a silent kill.
        signal(SIGPIPE, SIG_IGN)

        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.interactivePolicy()
        } catch {
            throw RoleRun.exit(reporting: error, json: json)
        }

        let payloads = ReceivedPayloads()
        let sink: any MessageSink
        do {
            sink = try makeSink(payloads: payloads)
        } catch let failure as SinkFailure {
            throw RoleRun.exit(reporting: failure, json: json)
        }

        let (session, logger) = try await RoleRun.openSession(verbose: common.verbose, json: json)
        defer { session.close() }
        let resumeSpool: ResumeSpool?
        do {
            resumeSpool = try bounds.resumeSpool(
                framed: receiverOptions.requestFramed,
                defaultDirectory: ResumeSpool.defaultInteractiveDirectory(
                    environment: ProcessInfo.processInfo.environment, homeDirectory: NSHomeDirectory()),
                outputDirectory: outputDirectory, warn: { logger.warning("\($0)") })
        } catch {
            throw RoleRun.exit(reporting: error, json: json)
        }

        let options = try common.targeting(receiverOptions, secureMode: secureMode)
        var configuration = options.configuration(messageCount: forever ? nil : (count ?? 1), stopOnCorruptMessage: true)
        configuration.resumeSpool = resumeSpool
        let central = Central(configuration: configuration, session: session)

        let mode = common.outputMode
        let carriesPayload = json && output == nil && outputDirectory == nil
        // Unstructured: renders while the role runs in `RoleRun.race`; ends with the event stream and is awaited below.
        let renderer = Task {
            var renderer = EventRenderer(mode: mode)
            for await event in central.events {
                var extra: [String: any Sendable] = [:]
                if mode == .jsonLines {
                    extra["elapsed"] = (ContinuousClock.now - started).seconds
                    // Wall-clock seconds since 1970, to line events up with other programs' logs.
                    extra["time"] = Date().timeIntervalSince1970
                    if carriesPayload, case .received(let summary, _, _) = event,
                        let payload = await payloads.take(summary.sequence) {
                        extra["base64"] = Data(payload).base64EncodedString()
                        let text = String(decoding: payload, as: UTF8.self)
                        if text.utf8.elementsEqual(payload) { extra["text"] = text }
                    }
                }
                renderer.render(event, extra: extra)
            }
            renderer.finish()
        }

        let timeout = common.timeoutDuration
        let outcome = await RoleRun.race(timeout: nil) {
            try await central.run(sink: sink, timeout: timeout)
        }
        await renderer.value

        try await RoleRun.end(outcome, json: json) { seconds in "timed out after \(RoleRun.format(seconds)) s" }
    }

    private func makeSink(payloads: ReceivedPayloads) throws -> any MessageSink {
        if let output { return try SingleFileSink(path: FilePath(output)) }
        if let outputDirectory { return try OutputDirectorySink(path: FilePath(outputDirectory), limits: receiverOptions.storageLimits) }
        if common.json { return PayloadRecordingSink(payloads: payloads) }
        return FileDescriptorSink()
    }
}

/// Messages waiting to be put into their `received` JSON event (standard output carries the
/// events then, so it cannot carry the message bytes as well).
actor ReceivedPayloads {
    private var bySequence: [Int: [UInt8]] = [:]

    func put(_ payload: [UInt8], sequence: Int) {
        bySequence[sequence] = payload
    }

    func take(_ sequence: Int) -> [UInt8]? {
        bySequence.removeValue(forKey: sequence)
    }
}

/// The sink for `--json` without an output option: the message travels in its event.
struct PayloadRecordingSink: MessageSink {
    let payloads: ReceivedPayloads

    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        await payloads.put(message.payload, sequence: sequence)
        return nil
    }
}
