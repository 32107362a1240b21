#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import DaemonSupport
import Logging
import Machines
import Options
import Roles
import ServiceLifecycle
import Storage
import Synchronization
import SystemPackage

/// What `bletransfer daemon` was asked to do (validated already by the command line).
package struct DaemonSettings: Sendable {
    package var role: DaemonRoleKind
    /// `--role receiver`: the options `receive` takes too (`ReceiverOptions` maps them).
    package var receiver: ReceiverOptions
    /// `--role sender`: the options `send` takes too (`SenderOptions` maps them).
    package var sender: SenderOptions
    package var outputDirectory: FilePath?
    package var outbox: FilePath?
    /// Sender: files larger than this go to failed/ (`--max-size`; the receiver's options carry it for the receiver).
    package var maximumMessageSize: Int
    package var settleTime: Duration
    package var json: Bool
    /// Receiver, framed version 2: the resume spool's directory (nil: no resume).
    package var resumeSpoolDirectory: String?
    /// `--spool-dir` was given: an unusable spool stops the daemon (else a warning, and cut messages restart at 0).
    package var resumeSpoolIsExplicit = false
    package var version: String
    /// Receiver: each authenticated sender's messages in a folder named after it (`--folder-per-sender`).
    package var folderPerSender = false
    /// Ask the adapter for the fast link when the process may (`--no-tune`: leave it).
    package var tunesLink = true

    package init(role: DaemonRoleKind, receiver: ReceiverOptions, sender: SenderOptions,
                outputDirectory: FilePath?, outbox: FilePath?, maximumMessageSize: Int = Int.max,
                settleTime: Duration, json: Bool, version: String) {
        self.role = role
        self.receiver = receiver
        self.sender = sender
        self.outputDirectory = outputDirectory
        self.outbox = outbox
        self.maximumMessageSize = maximumMessageSize
        self.settleTime = settleTime
        self.json = json
        self.version = version
    }

    /// The adapter the daemon's role uses (nil: BlueZ's first).
    package var adapterName: String? {
        switch role {
        case .receiver: receiver.adapterName
        case .sender: sender.adapterName
        }
    }
}

/// The daemon's life: set up the directory, tell systemd it is ready, keep the role running (`DaemonSupervisor`)
/// while reporting what it does (`DaemonReporter`) and pinging the watchdog, until SIGTERM or SIGINT; then shut down
/// gracefully — the role is cancelled and unregisters everything before it returns — and exit 0. The parts run as one
/// swift-service-lifecycle `ServiceGroup` (DaemonServices.swift).
package struct Daemon {
    package let settings: DaemonSettings
    var notifier = SystemdNotifier()
    private let logger = Logger(label: "bletransfer.daemon")

    package init(settings: DaemonSettings) { self.settings = settings }

    package func run() async -> ExitStatus {
        // A closed standard output (--json into a pipe that went away) must not kill the daemon.
        signal(SIGPIPE, SIG_IGN)
        let (reports, reportInput) = AsyncStream<DaemonReport>.makeStream(bufferingPolicy: .unbounded)
        // The role's progress also feeds the link watch's fallback; the stopping signal is kept for the last event.
        let progress = LinkProgressFeed()
        let stoppedBy = Mutex<Int32?>(nil)
        let report: @Sendable (DaemonReport) -> Void = { item in
            if case .role(let event) = item { progress.observe(event) }
            if case .stopping(let signal) = item { stoppedBy.withLock { $0 = $0 ?? signal } }
            reportInput.yield(item)
        }

        let attempt: DaemonSupervisor.Attempt
        let directory: String
        switch prepareRole(report: report) {
        case .success(let prepared): (attempt, directory) = prepared
        case .failure(let failure):
            reportStartFailure(failure)
            return ExitStatus(failure.kind)
        }
        logStarted(directory: directory)

        let reporter = DaemonReporter(
            status: DaemonStatus(role: settings.role, adapterName: settings.adapterName,
                                 residentBytes: ProcessMemory.residentBytes()),
            logger: logger, notifier: notifier, json: settings.json)
        // Ready once the directory is usable: waiting for Bluetooth (adapter off, bluetoothd absent) is normal work.
        do {
            try notifier.ready(status: reporter.status.line)
        } catch { logger.warning("cannot notify systemd", metadata: ["error": "\(error)"]) }
        let bluezLogger = Logger(label: "bletransfer.bluez")
        var supervisor = DaemonSupervisor(
            openSession: { try await BluetoothSession.open(logger: bluezLogger) },
            attempt: attempt, report: report)
        let adapter = settings.adapterName
        supervisor.diagnose = {
            let report = await BluetoothStatusReport.gather(adapterName: adapter)
            return report.verdict.status == .ready ? nil : (report.verdict.message, report.fixes.first)
        }
        let group = serviceGroup(supervisor: supervisor, progress: progress, report: report)
        // The reports are handled by a child of a task group around the services rather than by a service: it must
        // outlive them, to pass on what the role reports while it unregisters, and the service group may cancel its
        // services. It ends when `reportInput` is finished, and nothing cancels this task.
        await withTaskGroup(of: Void.self) { reporting in
            reporting.addTask {
                var reporter = reporter
                for await item in reports { reporter.handle(item) }
            }
            do {
                try await group.run()
            } catch { logger.error("daemon services failed", metadata: ["error": "\(error)"]) }
            reportInput.finish()
        }
        logger.notice("daemon stopped")
        if settings.json {
            // The last event: stopped by a signal, exit status 0 (docs/unattended.md).
            let signal = stoppedBy.withLock { $0 }
            EventRenderer.writeLine(JSONEvents.line("stopped", StoppedJSONEvent(
                reason: signal == nil ? "finished" : "signal", exitStatus: 0,
                signal: signal.map(StoppedJSONEvent.signalName))), to: 1)
        }
        return .success
    }

    /// A failure before the daemon runs, in the command line's voice; critical in the journal; with --json, last event.
    private func reportStartFailure(_ failure: RoleFailure) {
        let priority = JournalStream.isStandardErrorJournal ? "<2>" : ""
        if settings.json {
            EventRenderer.writeLine(JSONEvents.line("error", ErrorJSONEvent(
                failure.userMessage, kind: failure.kind.rawValue, exitStatus: Int(ExitStatus(failure.kind).rawValue))), to: 1)
        }
        EventRenderer.writeLine("\(priority)bletransfer: error: \(failure.userMessage)", to: 2)
    }

    private func logStarted(directory: String) {
        var metadata: Logger.Metadata = [
            "role": "\(settings.role.rawValue)", "directory": "\(directory)",
            "version": "\(settings.version)", "pid": "\(getpid())",
        ]
        if let adapter = settings.adapterName { metadata["adapter"] = "\(adapter)" }
        if notifier.isActive { metadata["systemd"] = "notify" }
        logger.notice("daemon started", metadata: metadata)
    }

    /// The daemon's services, shut down in reverse order: after the stop signal, the role, watchdog, link watch.
    private func serviceGroup(supervisor: DaemonSupervisor, progress: LinkProgressFeed,
                              report: @escaping @Sendable (DaemonReport) -> Void) -> ServiceGroup {
        // The group's own lines (started, shutting down) are debug detail next to ours.
        var groupLogger = logger
        groupLogger.logLevel = .warning
        let link = LinkWatchService(adapterName: settings.adapterName, tune: settings.tunesLink, restoreOnExit: true,
                                    progress: progress, emit: { event in report(.role(event)) })
        return ServiceGroup(configuration: ServiceGroupConfiguration(
            services: [
                // First, to stop after the role: it watches the role's link, then puts the adapter's defaults back.
                .init(service: link, successTerminationBehavior: .ignore),
                .init(service: WatchdogService(notifier: notifier, logger: logger),
                      successTerminationBehavior: .ignore),
                .init(service: RoleService(supervisor: supervisor),
                      successTerminationBehavior: .gracefullyShutdownGroup),
                .init(service: StopSignalService(report: report), successTerminationBehavior: .gracefullyShutdownGroup),
            ],
            logger: groupLogger))
    }

    /// Runs a role while its events go to `emit`; returns (or throws) once the role ended and its last event was
    /// passed on (a role's event stream finishes when its run ends).
    private static func run(forwarding events: AsyncStream<RoleEvent>,
                            to emit: @escaping @Sendable (RoleEvent) -> Void,
                            _ role: () async throws -> Void) async throws {
        // Unstructured: a child task would be cancelled with the attempt (the supervisor cancels it when Bluetooth
        // goes away or the daemon stops) and stop iterating, dropping what the role reports while it unregisters.
        // This one ends when the stream does, and is awaited on every path.
        let forward = Task {
            for await event in events { emit(event) }
        }
        do {
            try await role()
        } catch {
            await forward.value
            throw error
        }
        await forward.value
    }

    /// Opens the role's directory and builds what one attempt of the role runs.
    private func prepareRole(report: @escaping @Sendable (DaemonReport) -> Void)
        -> Result<(DaemonSupervisor.Attempt, String), RoleFailure>
    {
        switch settings.role {
        case .receiver:
            let path = settings.outputDirectory ?? FilePath(".")
            // A daemon keeps receiving after a message that fails verification.
            var configuration = settings.receiver.configuration(messageCount: nil, stopOnCorruptMessage: false)
            if let directory = settings.resumeSpoolDirectory {
                let output = path.string.hasSuffix("/") ? path.string : path.string + "/"
                if directory == path.string || directory.hasPrefix(output) {
                    // Nothing partial may ever appear in the output directory.
                    return .failure(RoleFailure(.usage, "--spool-dir \(directory) is inside the output directory; give a private directory"))
                }
                do {
                    // Checkpoints stop growing at the same --reserve as stored messages.
                    configuration.resumeSpool = try ResumeSpool(
                        directory: directory, bounds: .init(reserveBytes: settings.receiver.storageLimits.reserveBytes))
                    configuration.receiptJournal = ReceiptJournal(directory: path.string, stateDirectory: directory)
                } catch {
                    if settings.resumeSpoolIsExplicit {
                        return .failure(RoleFailure(.ioError, "--spool-dir: \(error)"))
                    }
                    logger.warning("\(error); messages cut midway start again from byte 0 (--spool-dir sets another place)")
                }
            }
            let directory: OutputDirectory
            do {
                directory = try OutputDirectory(path: path)
            } catch {
                let failure = OutputDirectorySink.failure(error)
                return .failure(RoleFailure(failure.kind, failure.userMessage))
            }
            // The spool's copy of a message counts against the reserve beside the message.
            let sink = InboxSink(directory: directory, limits: settings.receiver.storageLimits,
                                 folderPerSender: settings.folderPerSender, resumeSpool: configuration.resumeSpool)
            let attempt: DaemonSupervisor.Attempt = { [configuration] session, emit in
                let central = Central(configuration: configuration, session: session)
                try await Self.run(forwarding: central.events, to: emit) { try await central.run(sink: sink) }
            }
            return .success((attempt, path.string))
        case .sender:
            let path = settings.outbox ?? FilePath(".")
            let source: OutboxMessageSource
            do {
                source = try OutboxMessageSource(
                    directory: path, maximumFileSize: settings.maximumMessageSize,
                    settleTime: settings.settleTime, report: { report(.outbox($0)) })
            } catch {
                let kind: FailureKind = switch error {
                case .notWritable: .permissionDenied
                case .cannotCreate: .cannotCreate
                default: .ioError
                }
                return .failure(RoleFailure(kind, "--outbox: \(error)"))
            }
            let peripheralConfiguration = settings.sender.configuration
            let attempt: DaemonSupervisor.Attempt = { session, emit in
                let peripheral = Peripheral(configuration: peripheralConfiguration, session: session,
                                            logger: Logger(label: "bletransfer.peripheral"))
                try await Self.run(forwarding: peripheral.events, to: emit) { _ = try await peripheral.run(source: source) }
            }
            return .success((attempt, path.string))
        }
    }
}
