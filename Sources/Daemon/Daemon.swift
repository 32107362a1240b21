#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import DaemonSupport
import Logging
import Roles
import SystemPackage
import Transfer

/// What `bletransfer daemon` was asked to do.
struct DaemonSettings: Sendable {
    var role: DaemonRoleKind
    var adapterName: String?
    var serviceUUID: BluetoothUUID
    var characteristicUUID: BluetoothUUID
    /// Receiver: where messages are stored.
    var outputDirectory: FilePath?
    /// Sender: the directory whose files are sent.
    var outbox: FilePath?
    var localName: String
    var offersAcquireNotify: Bool
    var limits: TransferLimits
    var minimumRSSI: Int?
    var idleTimeout: Duration
    var requestFramed: Bool
    var minimumRate: Int = CentralConfiguration.defaultMinimumRate
    var storageLimits: StorageLimits = .default
    var settleTime: Duration
    var json: Bool
    /// Sender: how long a central may take, and the compat order guard.
    var senderBounds = SenderBoundOptions()
    /// Sender: `--min-rate` (nil: the sender's default; 0: no floor).
    var senderMinimumRate: Int?
}

/// The daemon's life: set up the directory, tell systemd it is ready, keep the role running
/// (`DaemonSupervisor`) while reporting what it does (`DaemonReporter`) and pinging the
/// watchdog, until SIGTERM or SIGINT; then cancel the role, which unregisters everything
/// before it returns, and exit 0.
struct Daemon {
    let settings: DaemonSettings
    var notifier = SystemdNotifier()
    private let logger = Logger(label: "bletransfer.daemon")

    init(settings: DaemonSettings) {
        self.settings = settings
    }

    func run() async -> ExitStatus {
        // A closed standard output (--json into a pipe that went away) must not kill the daemon.
        signal(SIGPIPE, SIG_IGN)
        let (reports, reportInput) = AsyncStream<DaemonReport>.makeStream(bufferingPolicy: .unbounded)
        let report: @Sendable (DaemonReport) -> Void = { reportInput.yield($0) }

        let attempt: DaemonSupervisor.Attempt
        let directory: String
        switch prepareRole(report: report) {
        case .success(let prepared): (attempt, directory) = prepared
        case .failure(let failure):
            logger.critical("\(failure.message)")
            return failure.status
        }

        var metadata: Logger.Metadata = [
            "role": "\(settings.role.rawValue)", "directory": "\(directory)",
            "version": "\(BLETransferVersion.current)", "pid": "\(getpid())",
        ]
        if let adapter = settings.adapterName { metadata["adapter"] = "\(adapter)" }
        if notifier.isActive { metadata["systemd"] = "notify" }
        logger.notice("daemon started", metadata: metadata)

        let reporter = DaemonReporter(
            status: DaemonStatus(role: settings.role, adapterName: settings.adapterName,
                                 residentBytes: ProcessMemory.residentBytes()),
            logger: logger, notifier: notifier, json: settings.json)
        // Ready as soon as the directory is usable: Bluetooth may take a while (adapter off,
        // bluetoothd absent), and waiting for it is part of the daemon's normal work.
        do {
            try notifier.ready(status: reporter.status.line)
        } catch {
            logger.warning("cannot notify systemd", metadata: ["error": "\(error)"])
        }
        let reporting = Task {
            var reporter = reporter
            for await item in reports { reporter.handle(item) }
        }
        let notifier = self.notifier
        let logger = self.logger
        let watchdog = Task {
            await notifier.keepWatchdogAlive { error in
                logger.warning("watchdog ping failed", metadata: ["error": "\(error)"])
            }
        }

        let bluezLogger = Logger(label: "bletransfer.bluez")
        let supervisor = DaemonSupervisor(
            openSession: { try await BluetoothSession.open(.system, logger: bluezLogger) },
            attempt: attempt, report: report)
        let signals = SignalWatcher(signals: [SIGINT, SIGTERM])
        let supervising = Task { await supervisor.run() }
        for await signal in signals.stream {
            report(.stopping(signal: signal))
            break
        }
        // Cancelling the role unregisters advertisement and application, stops discovery,
        // disconnects, and drops the transfer under way; it returns once that is done.
        supervising.cancel()
        await supervising.value
        watchdog.cancel()
        reportInput.finish()
        await reporting.value
        logger.notice("daemon stopped")
        signals.stop()
        return .success
    }

    private struct SetupFailure: Error {
        let status: ExitStatus
        let message: String
    }

    /// Opens the role's directory and builds what one attempt of the role runs.
    private func prepareRole(report: @escaping @Sendable (DaemonReport) -> Void)
        -> Result<(DaemonSupervisor.Attempt, String), SetupFailure>
    {
        switch settings.role {
        case .receiver:
            let path = settings.outputDirectory ?? FilePath(".")
            let sink: InboxSink
            do {
                sink = try InboxSink(path: path, limits: settings.storageLimits)
            } catch {
                let status: ExitStatus = if case .notWritable = error { .permissionDenied } else { .ioError }
                return .failure(SetupFailure(status: status, message: "--output-dir: \(error)"))
            }
            let configuration = CentralConfiguration(
                adapterName: settings.adapterName, serviceUUID: settings.serviceUUID,
                characteristicUUID: settings.characteristicUUID, messageCount: nil,
                minimumRSSI: settings.minimumRSSI, limits: settings.limits, requestFramed: settings.requestFramed,
                idleTimeout: settings.idleTimeout, minimumRate: settings.minimumRate, stopOnCorruptMessage: false)
            let attempt: DaemonSupervisor.Attempt = { session, emit in
                let central = Central(configuration: configuration, session: session)
                let forward = Task {
                    for await event in central.events { emit(event) }
                }
                do {
                    try await central.run(sink: sink)
                } catch {
                    await forward.value
                    throw error
                }
                await forward.value
            }
            return .success((attempt, path.string))
        case .sender:
            let path = settings.outbox ?? FilePath(".")
            let source: OutboxMessageSource
            do {
                source = try OutboxMessageSource(
                    directory: path, maximumFileSize: settings.limits.maximumMessageSize,
                    settleTime: settings.settleTime, report: { report(.outbox($0)) })
            } catch {
                let status: ExitStatus = if case .notWritable = error { .permissionDenied } else { .ioError }
                return .failure(SetupFailure(status: status, message: "--outbox: \(error)"))
            }
            var configuration = settings.senderBounds.applied(to: PeripheralConfiguration(
                adapterName: settings.adapterName, serviceUUID: settings.serviceUUID,
                characteristicUUID: settings.characteristicUUID, localName: settings.localName,
                offersAcquireNotify: settings.offersAcquireNotify))
            if let rate = settings.senderMinimumRate { configuration.minimumTransferRate = rate }
            let peripheralConfiguration = configuration
            let attempt: DaemonSupervisor.Attempt = { session, emit in
                let peripheral = Peripheral(configuration: peripheralConfiguration, session: session,
                                            logger: Logger(label: "bletransfer.peripheral"))
                // The peripheral's event stream finishes when its run ends.
                let forward = Task {
                    for await event in peripheral.events { emit(event) }
                }
                do {
                    _ = try await peripheral.run(source: source)
                } catch {
                    await forward.value
                    throw error
                }
                await forward.value
            }
            return .success((attempt, path.string))
        }
    }
}
