import ArgumentParser
import BlueZ
import Daemon
import DaemonSupport
import Logging
import Machines
import Roles
import ServiceLifecycle
import Synchronization
import Transfer
import UnixSignals

#if canImport(Glibc)
import Glibc
#endif

/// Runs a role until it finishes, fails, its deadline passes, or SIGINT / SIGTERM arrives. On a deadline or a signal
/// the role is asked to stop — `Peripheral` and `Central` see the group's graceful shutdown and leave their loops,
/// releasing links and unregistering in their own, uncancelled task — and awaited: nothing of ours stays registered.
enum RoleRun {
    enum Outcome: Sendable {
        case finished
        case failed(any Error)
        /// The deadline (in seconds) passed.
        case timedOut(Double)
        /// This signal arrived (SIGINT or SIGTERM); exit with 128 + signal.
        case interrupted(Int32)
    }

    /// Runs `role` as a swift-service-lifecycle `ServiceGroup` beside a `StopSignalService` and, with a `timeout`, a
    /// `DeadlineService`: whichever ends first names the outcome and shuts the group down gracefully, the role last
    /// (`RoleService`). `render`, when given, consumes the role's events beside the group and is awaited after it, so
    /// that every event, down to those of the role's teardown, is rendered before the outcome is returned; it must
    /// return once the role's event stream finishes.
    static func run(timeout: Duration?, stopping: Stopping = .gracefully, link: LinkedEvents? = nil,
                    rendering render: (@Sendable () async -> Void)? = nil,
                    _ role: @escaping @Sendable () async throws -> Void) async -> Outcome {
        // Trapped before the role starts: an early Ctrl-C must not leave our GATT application or advertisement behind.
        let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
        let firstEnd = FirstEnd()
        // Shut down in reverse order: the deadline and the signal watch first, the role last.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: RoleService(role: role, stopping: stopping, firstEnd: firstEnd),
                  successTerminationBehavior: .gracefullyShutdownGroup),
            .init(service: StopSignalService(signals: signals, firstEnd: firstEnd),
                  successTerminationBehavior: .gracefullyShutdownGroup),
        ]
        if let timeout {
            services.append(.init(service: DeadlineService(timeout: timeout, firstEnd: firstEnd),
                                  successTerminationBehavior: .gracefullyShutdownGroup))
        }
        // First, so it is shut down last: the link is watched until the role let go of it, then the defaults put back.
        if let link { services.insert(.init(service: link.service, successTerminationBehavior: .ignore), at: 0) }
        // The group's own lines (starting, shutting down) are not the command's to print.
        let group = ServiceGroup(configuration: ServiceGroupConfiguration(
            services: services, logger: Logger(label: "bletransfer.services") { _ in SwiftLogNoOpLogHandler() }))
        // A child of this task, not a service: the group cancels its services when one ends while another shuts down,
        // and a cancelled renderer would stop reading and lose the role's last events. This task is never cancelled.
        await withTaskGroup(of: Void.self) { rendering in
            if let link { rendering.addTask { await link.forwardRoleEvents() } }
            if let render { rendering.addTask { await render() } }
            // No service throws: each records its end in `firstEnd`; the group's own error (a service ending while
            // another shuts down) changes nothing, and the group has awaited every service either way.
            try? await group.run()
        }
        return firstEnd.outcome ?? .finished
    }

    /// The role's events with the link watch's merged in (`stream`, what the command renders),
    /// and the watch to run beside the role (`--no-tune` keeps the adapter as it is).
    struct LinkedEvents: Sendable {
        let stream: AsyncStream<RoleEvent>
        let service: LinkWatchService
        private let roleEvents: AsyncStream<RoleEvent>
        private let input: AsyncStream<RoleEvent>.Continuation
        private let progress: LinkProgressFeed

        init(role roleEvents: AsyncStream<RoleEvent>, adapter: String?, tune: Bool) {
            let (stream, input) = AsyncStream<RoleEvent>.makeStream(bufferingPolicy: .unbounded)
            let progress = LinkProgressFeed()
            self.stream = stream
            self.input = input
            self.roleEvents = roleEvents
            self.progress = progress
            service = LinkWatchService(adapterName: adapter, tune: tune, restoreOnExit: true, progress: progress,
                                       emit: { input.yield($0) })
        }

        /// Passes the role's events on until their stream ends, then ends `stream` (later link reports are not shown).
        func forwardRoleEvents() async {
            for await event in roleEvents {
                progress.observe(event)
                input.yield(event)
            }
            input.finish()
        }
    }

    /// How the run ended: the first service to record it wins; later ones (the role's
    /// `CancellationError` after a signal, a signal during the teardown) do not count.
    final class FirstEnd: Sendable {
        private let recorded = Mutex<Outcome?>(nil)

        func record(_ outcome: Outcome) {
            recorded.withLock { if $0 == nil { $0 = outcome } }
        }

        var outcome: Outcome? { recorded.withLock { $0 } }
    }

    /// How the graceful shutdown reaches the role.
    enum Stopping: Sendable {
        /// The role watches the graceful shutdown itself (`Peripheral` and `Central` do, through
        /// `GracefulStop`) and returns once it has let go of everything; it bounds that itself.
        case gracefully
        /// The role knows nothing of the graceful shutdown (pairing): it is cancelled, which starts its teardown.
        case byCancellation
    }

    /// Runs the role until it returns or throws (ending the run) or the graceful shutdown stopped it (``Stopping``).
    struct RoleService: Service {
        let role: @Sendable () async throws -> Void
        let stopping: Stopping
        let firstEnd: FirstEnd

        func run() async {
            do {
                switch stopping {
                case .gracefully: try await role()
                case .byCancellation: try await cancelWhenGracefulShutdown(role)
                }
                firstEnd.record(.finished)
            } catch { firstEnd.record(.failed(error)) }
        }
    }

    /// Returns when SIGINT or SIGTERM arrives, recording which (exit status 128 + it), or at the graceful shutdown.
    struct StopSignalService: Service {
        let signals: UnixSignalsSequence
        let firstEnd: FirstEnd

        func run() async {
            for await signal in signals.cancelOnGracefulShutdown() {
                firstEnd.record(.interrupted(signal.rawValue))
                return
            }
        }
    }

    /// Returns once `timeout` passed, recording it (`--timeout`), or at the graceful shutdown.
    struct DeadlineService: Service {
        let timeout: Duration
        let firstEnd: FirstEnd

        func run() async {
            let timeout = self.timeout
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: timeout) }
            } catch { return }
            firstEnd.record(.timedOut(timeout.seconds))
        }
    }

    /// The system-bus session a command's role runs on, and the logger it logs through (warnings, errors only with
    /// --quiet, debug with --verbose; DaemonLogHandler escapes what a peer may have put into a line). A bus that
    /// cannot be reached ends the command: one line, status 69.
    static func openSession(reporting: ReportingOptions, adapter: String?) async throws -> (BluetoothSession, Logger) {
        var logger = Logger(label: "bletransfer") { DaemonLogHandler.standardError(label: $0) }
        logger.logLevel = reporting.verbose ? .debug : reporting.quiet ? .error : .warning
        return (try await openSession(logger: logger, json: reporting.json, adapter: adapter), logger)
    }

    /// The system-bus session once Bluetooth can start (``BluetoothDiagnosis/atStart(of:adapter:)``): what would end
    /// the role at once ends the command here, in `status`'s words with its fix as hint, before anything is on disk.
    static func openSession(logger: Logger, json: Bool, adapter: String?) async throws -> BluetoothSession {
        let session: BluetoothSession
        do {
            session = try await BluetoothSession.open(logger: logger)
        } catch {
            let diagnosis = await BluetoothDiagnosis.now(adapter: adapter)
            throw exit(reporting: diagnosis?.failure(.unavailable) ?? CommandFailure(.unavailable, "\(error)"), json: json)
        }
        if let diagnosis = BluetoothDiagnosis.atStart(of: session, adapter: adapter) {
            session.close()
            let kind: FailureKind = diagnosis.status == .permissionDenied ? .permissionDenied
                : diagnosis.status == .usage ? .usage : .unavailable
            if json && kind == .permissionDenied {
                // The state the role would have reported (CoreBluetooth's `unauthorized`), so
                // that a script watching `state` events sees it before the error.
                EventRenderer.writeLine(EventRenderer.jsonLine(
                    for: .stateChanged(from: .unknown, to: .unauthorized, detail: diagnosis.message)), to: 1)
            }
            throw exit(reporting: diagnosis.failure(kind), json: json)
        }
        return session
    }

    /// Ends a command the way its role ended: returns when the role finished; otherwise throws the exit code, after
    /// one line for a failure or the deadline (`timedOut` words it), or 128 + the signal that stopped it.
    ///
    /// A failure because of Bluetooth (unavailable, access denied), and a deadline that passed while Bluetooth was
    /// not ready, are worded as `status` words the state then, with its fix as the hint: "timed out after 5 s: hci0
    /// is powered off", not only "timed out". With `json`, the last event is an `error` (failures) or `stopped` event
    /// (finished, or a signal).
    static func end(_ outcome: Outcome, json: Bool, adapter: String?, timedOut: (Double) async -> String) async throws {
        switch outcome {
        case .finished:
            if json { writeStopped(StoppedJSONEvent(reason: "finished", exitStatus: 0)) }
            return
        case .failed(let error):
            let failure = (error as? any ClassifiedFailure) ?? RoleFailure(.software, "unexpected failure: \(error)")
            throw exit(reporting: await explained(failure, adapter: adapter), json: json)
        case .timedOut(let seconds):
            throw exit(reporting: await explained(RoleFailure(.timedOut, await timedOut(seconds)), adapter: adapter), json: json)
        case .interrupted(let signal):
            let status = 128 + signal
            if json { writeStopped(StoppedJSONEvent(reason: "signal", exitStatus: Int(status), signal: StoppedJSONEvent.signalName(signal))) }
            throw ExitCode(status)
        }
    }

    static func writeStopped(_ event: StoppedJSONEvent) {
        EventRenderer.writeLine(JSONEvents.line("stopped", event), to: 1)
    }

    /// `failure` in `status`'s words when Bluetooth is why (its message, appended to a deadline's: "timed out after
    /// 5 s: hci0 is powered off…"), with status's fix as the hint; unchanged when Bluetooth is ready.
    static func explained(_ failure: any ClassifiedFailure, adapter: String?) async -> any ClassifiedFailure {
        guard [.unavailable, .permissionDenied, .timedOut].contains(failure.kind),
              let diagnosis = await BluetoothDiagnosis.now(adapter: adapter) else { return failure }
        if failure.kind == .timedOut {
            return CommandFailure(.timedOut, "\(failure.userMessage): Bluetooth was not ready: \(diagnosis.message)",
                                  hint: diagnosis.hint)
        }
        return diagnosis.failure(failure.kind)
    }

    /// `exitCode(reporting:json:)` inside a command, where ParsableCommand's static `exitCode(for:)` hides it.
    static func exit(reporting failure: any ClassifiedFailure, json: Bool, hint: String? = nil) -> ExitCode {
        exitCode(reporting: failure, json: json, hint: hint)
    }

    static func format(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
