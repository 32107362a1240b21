import ArgumentParser
import Daemon
import BlueZ
import DaemonSupport
import Foundation
import Machines
import Options
import Roles
import Storage
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
        usage: "bletransfer receive [<options>]",
        discussion: HelpText.discussion("""
            Without -o or --output-dir the message goes to standard output.

            EXAMPLES:
              bletransfer receive                       one message to standard output
              bletransfer receive -o note.txt --timeout 2m
              bletransfer receive --output-dir ~/inbox --forever --max-size 1G
              bletransfer receive --from desk -o -      only from the peer listed as desk
            """, manual: """
            Scans for the transfer service, connects to the first peripheral that offers it, \
            subscribes to the transfer characteristic and collects the message, then \
            unsubscribes, disconnects and scans again for the next message. Only a whole \
            message is ever written: a transfer cut short (peer gone, silent for --idle-timeout, \
            Bluetooth switched off) is dropped and tried again.

            Output: without --output or --output-dir (or with --output -) the message goes to \
            standard output, byte for byte (several messages one after another, nothing in \
            between). --output PATH replaces PATH atomically with the one message. --output-dir \
            DIR stores each message in a new file (message-<UTC time>-<n>.txt or .bin), \
            atomically, never overwriting; a file a bletransfer sender named keeps its name \
            (sanitized, -1, -2... before the extension when taken) and modification time.

            Bounds: a transfer slower than --min-rate (after its first 20 s) is dropped and its \
            sender backs off; with --output-dir, a message is refused before it is received \
            unless --reserve bytes stay free after it and the directory stays within \
            --quota-bytes/--quota-files. A refused message is not acknowledged: its sender keeps \
            it. Each refusal is one line (a "refused" event with --json).

            Terminal: a message written to standard output on a terminal shows control \
            characters escaped (\\x1b...) and bytes that are not UTF-8 as U+FFFD; a pipe or file \
            gets the exact bytes.

            Formats: before subscribing, receive asks the peripheral for the framed format \
            (encrypted records, acknowledged after verification); a peer that does not answer it \
            (Apple's sample, other tools) is read in Apple's format: chunks, then "EOM". \
            --compat never asks.

            --json prints one event per line on standard output; with no output option, the \
            "received" event carries the message: "base64" always, "text" when it is valid UTF-8.

            Resume: a framed transfer cut short keeps its verified start in --spool-dir \
            (default $XDG_STATE_HOME/bletransfer/spool or ~/.local/state/bletransfer/spool), \
            mode 0700, never inside the output directory; at most 256 MiB, entries removed \
            after 7 days.

            Bluetooth states: no bluetoothd, no adapter, no LE support or an access-denying D-Bus \
            policy at start end the command at once (69, or 77 when denied). A powered-off \
            adapter is waited for (a hint is printed); so is an adapter or bluetoothd that goes \
            away later: work resumes when it is back. --timeout bounds the whole run (75).
            """))

    @OptionGroup(title: "Input and output") var destination: ReceiveOutputOptions
    @OptionGroup(title: "Input and output") var reporting: ReportingOptions
    @OptionGroup(title: "Peers and trust") var trust: TrustOptions
    @OptionGroup(title: "Peers and trust") var openness: InsecureAnyPeerOption
    @OptionGroup(title: "Peers and trust") var sender: FromPeerOption
    @OptionGroup(title: "Bluetooth") var bluetooth: BluetoothOptions
    @OptionGroup(title: "Bluetooth") var rssi: SignalStrengthOption
    @OptionGroup(title: "Limits") var timeout: TimeoutOption
    @OptionGroup(title: "Limits") var messageLimits: ReceiverMessageOptions
    @OptionGroup(title: "Limits") var bounds: ReceiverBoundOptions
    @OptionGroup(title: "Advanced") var format: CompatOption
    @OptionGroup(title: "Advanced") var transport: TransportOptions
    @OptionGroup(title: "Advanced") var spool: SpoolOption

    /// `--output`, unless it is `-` (standard output).
    var outputPath: String? { destination.output == "-" ? nil : destination.output }
    var outputDirectory: String? { destination.outputDirectory }
    var count: Int? { destination.count }
    var forever: Bool { destination.forever }

    mutating func validate() throws {
        if !sender.from.isEmpty && (format.compat || openness.insecureAnyPeer) {
            throw ValidationError("--from takes messages only from that authorized peer: it cannot be combined with "
                + (format.compat ? "--compat" : "--insecure-any-peer"))
        }
        if format.compat && trust.authorizedPeers != nil {
            throw ValidationError("--compat and --authorized-peers cannot be combined: Apple's format has no secure mode")
        }
        if bounds.isStorageSet && outputDirectory == nil {
            throw ValidationError("--reserve, --quota-bytes and --quota-files are for --output-dir DIR")
        }
        if destination.output != nil && outputDirectory != nil {
            throw ValidationError("give either --output or --output-dir, not both")
        }
        if destination.output?.isEmpty == true { throw ValidationError("--output: give a file path, or - for standard output") }
        if destination.output == "-" && reporting.json {
            throw ValidationError("--output - and --json cannot be combined: --json prints its events on standard output")
        }
        try checkingRepetition(count: count, forever: forever)
        if outputPath != nil && (forever || (count ?? 1) > 1) {
            throw ValidationError("--output holds one message; use --output-dir DIR with --count or --forever")
        }
        try checkingOptions { try receiverOptions.validate() }
    }

    /// Everything `receive` takes that `daemon --role receiver` takes too, but the adapter, UUIDs and keys.
    private var receiverOptions: ReceiverOptions {
        bounds.receiverOptions(minimumRSSI: rssi.minimumRSSI, maximumSize: messageLimits.maximumSize,
                               idleTimeout: messageLimits.idle.idleTimeout, compat: format.compat)
    }

    func run() async throws {
        let json = reporting.json
        let started = ContinuousClock.now
        // A closed pipe must be an error we report (exit 74), not a silent kill.
        signal(SIGPIPE, SIG_IGN)

        let secureMode: SecureModePolicy?
        do {
            secureMode = try trust.interactivePolicy(anyPeer: openness.insecureAnyPeer || format.compat,
                                                     addressing: PeerAddressing(option: "--from", peers: sender.from))
        } catch { throw RoleRun.exit(reporting: error, json: json) }

        let payloads = ReceivedPayloads()
        // Where messages go, checked without making anything: a bad path is told first.
        if let failure = precheckedDestination() { throw RoleRun.exit(reporting: failure, json: json) }
        // Bluetooth next: what would end the run at once ends it before the output directory or the spool is made.
        let (session, logger) = try await RoleRun.openSession(reporting: reporting, adapter: bluetooth.adapter)
        defer { session.close() }
        if sender.from.isEmpty, let notice = trust.unauthenticatedNotice(anyPeer: openness.insecureAnyPeer || format.compat) {
            reporting.warn(notice)
        }
        let resumeSpool: ResumeSpool?
        do {
            resumeSpool = try bounds.resumeSpool(
                spool: spool, framed: receiverOptions.requestFramed,
                defaultDirectory: ResumeSpool.defaultInteractiveDirectory(
                    environment: ProcessInfo.processInfo.environment, homeDirectory: NSHomeDirectory()),
                outputDirectory: outputDirectory, warn: { logger.warning("\($0)") })
        } catch { throw RoleRun.exit(reporting: error, json: json) }
        let sink: any MessageSink
        do {
            sink = try makeSink(payloads: payloads, resumeSpool: resumeSpool)
        } catch let failure as SinkFailure { throw RoleRun.exit(reporting: failure, json: json) }

        let central = Central(configuration: try centralConfiguration(secureMode: secureMode, resumeSpool: resumeSpool),
                              session: session)

        let mode = reporting.outputMode
        let carriesPayload = json && outputPath == nil && outputDirectory == nil
        let deadline = self.timeout.duration
        // The deadline is the central's own (`run(sink:timeout:)`), which words the line.
        let link = RoleRun.LinkedEvents(role: central.events, adapter: bluetooth.adapter, tune: !bluetooth.noTune)
        let outcome = await RoleRun.run(timeout: nil, link: link, rendering: {
            var renderer = EventRenderer(mode: mode)
            for await event in link.stream {
                var extras = JSONEventExtras()
                if mode == .jsonLines {
                    extras.elapsed = (ContinuousClock.now - started).seconds
                    if carriesPayload, case .received(let summary, _, _) = event,
                        let payload = await payloads.take(summary.sequence) {
                        extras.base64 = Data(payload).base64EncodedString()
                        let text = String(decoding: payload, as: UTF8.self)
                        if text.utf8.elementsEqual(payload) { extras.text = text }
                    }
                }
                renderer.render(event, extras: extras)
            }
            renderer.finish()
        }) {
            try await central.run(sink: sink, timeout: deadline)
        }

        try await RoleRun.end(outcome, json: json, adapter: bluetooth.adapter) { seconds in "timed out after \(RoleRun.format(seconds)) s" }
    }

    /// The central's settings from the options: how many messages, where resume points and receipts are kept.
    private func centralConfiguration(secureMode: SecureModePolicy?, resumeSpool: ResumeSpool?) throws -> CentralConfiguration {
        let options = try bluetooth.targeting(receiverOptions, secureMode: secureMode, transport: transport)
        // Into a directory without --count: every file of the sender's session (a tree, several files), then stop.
        let wholeSession = outputDirectory != nil && count == nil && !forever
        var configuration = options.configuration(messageCount: forever || wholeSession ? nil : (count ?? 1),
                                                  stopOnCorruptMessage: true)
        configuration.endsWithSendersSession = wholeSession
        configuration.resumeSpool = resumeSpool
        if let outputDirectory, let resumeSpool {
            configuration.receiptJournal = ReceiptJournal(directory: outputDirectory, stateDirectory: resumeSpool.directory)
        }
        return configuration
    }

    /// What is wrong with `--output` or `--output-dir`, found without making anything.
    private func precheckedDestination() -> SinkFailure? {
        do {
            if let outputPath { _ = try SingleFileSink(path: FilePath(outputPath)) }
            if let outputDirectory { try OutputDirectorySink.precheck(FilePath(outputDirectory)) }
            return nil
        } catch { return error }
    }

    private func makeSink(payloads: ReceivedPayloads, resumeSpool: ResumeSpool?) throws -> any MessageSink {
        if let outputPath { return try SingleFileSink(path: FilePath(outputPath)) }
        if let outputDirectory {
            // The spool's copy of a message counts against the reserve beside the message.
            return try OutputDirectorySink(path: FilePath(outputDirectory), limits: receiverOptions.storageLimits,
                                           resumeSpool: resumeSpool)
        }
        if reporting.json { return PayloadRecordingSink(payloads: payloads) }
        return FileDescriptorSink()
    }
}

/// Where `receive` puts messages, and how many it waits for.
struct ReceiveOutputOptions: ParsableArguments {
    @Option(name: .shortAndLong, help: ArgumentHelp(
        "Write the message to this file (-: standard output).", valueName: "PATH"))
    var output: String?

    @Option(name: .customLong("output-dir"), help: ArgumentHelp(
        "Write each message to a new file in this directory.", valueName: "DIR"))
    var outputDirectory: String?

    @Option(name: .long, help: ArgumentHelp(
        "Exit after this many messages (default 1; --output-dir: all of one send).", valueName: "N"))
    var count: Int?

    @Flag(name: .long, help: "Keep receiving until interrupted.") var forever = false
}

/// `--min-rssi` of `receive` and `daemon --role receiver`.
struct SignalStrengthOption: ParsableArguments {
    @Option(name: .customLong("min-rssi"), parsing: .unconditional, help: ArgumentHelp(
        "Ignore senders heard weaker than this (e.g. -70).", valueName: "DBM"))
    var minimumRSSI: Int?
}

/// `--max-size` and `--idle-timeout` of `receive` (the daemon's `--max-size` bounds both roles).
struct ReceiverMessageOptions: ParsableArguments {
    @Option(name: .customLong("max-size"), help: ArgumentHelp(
        "Refuse larger messages (default: 64M held in memory).", valueName: "BYTES"), transform: bytes)
    var maximumSize: Int?

    @OptionGroup var idle: IdleTimeoutOption
}

/// `--idle-timeout` of `receive` and `daemon --role receiver`.
struct IdleTimeoutOption: ParsableArguments {
    @Option(name: .customLong("idle-timeout"), help: ArgumentHelp(
        "Drop a transfer silent this long (default 15s).", valueName: "TIME"), transform: seconds)
    var idleTimeout: Double?
}

/// `--compat` of `receive` and `daemon --role receiver`.
struct CompatOption: ParsableArguments {
    @Flag(name: .long, help: "Behave like Apple's sample (no framed format).") var compat = false
}

/// Messages waiting for their `received` JSON event (standard output carries the events, so not the message bytes).
actor ReceivedPayloads {
    private var bySequence: [Int: [UInt8]] = [:]

    func put(_ payload: [UInt8], sequence: Int) { bySequence[sequence] = payload }

    func take(_ sequence: Int) -> [UInt8]? { bySequence.removeValue(forKey: sequence) }
}

/// The sink for `--json` without an output option: the message travels in its event.
struct PayloadRecordingSink: MessageSink {
    let payloads: ReceivedPayloads

    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        await payloads.put(message.payload, sequence: sequence)
        return nil
    }
}

/// `receive --from`: only messages from these authorized peers.
struct FromPeerOption: ParsableArguments {
    @Option(name: .customLong("from"), help: ArgumentHelp(
        "Only from this authorized peer (name or fingerprint; repeatable).", valueName: "PEER"))
    var from: [String] = []
}
