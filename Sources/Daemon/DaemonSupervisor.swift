import BlueZ
import DaemonSupport
import Machines
import Roles

/// Keeps one role running until the daemon is told to stop: the graceful shutdown of its service group, which the
/// role sees itself (`GracefulStop`) and ends by letting go of everything, or, failing that, cancellation.
///
/// The engines ride out what happens while they run — adapter powered off and on, removed and plugged back,
/// bluetoothd restarted — through their manager-state driver. What makes a run end instead (bluetoothd absent or the
/// adapter unknown when it starts, access denied, the system bus gone, a message that cannot be stored) is reported
/// as "waiting" and the role is started again after a pause: 1 s, doubling per consecutive failure, at most 30 s, and
/// back to 1 s after a run that reached `poweredOn`. Each attempt opens a new bus connection, so a D-Bus policy or
/// group change takes effect without restarting the daemon.
struct DaemonSupervisor: Sendable {
    /// Runs the role once on `session`, its events to `emit`; returns when it ends by itself, throws what stopped it.
    typealias Attempt = @Sendable (_ session: BluetoothSession, _ emit: @escaping @Sendable (RoleEvent) -> Void)
        async throws -> Void

    let openSession: @Sendable () async throws -> BluetoothSession
    let attempt: Attempt
    let report: @Sendable (DaemonReport) -> Void
    /// What `status` says when Bluetooth is why the role could not run: its line and fix (nil: ready, or not asked).
    var diagnose: @Sendable () async -> (message: String, hint: String?)? = { nil }
    var backoff = BackoffPolicy(initial: .seconds(1), maximum: .seconds(30))
    /// The least time between two starts of a role that ended without a failure.
    var minimumRestartInterval: Duration = .seconds(1)

    /// Returns only when stopped (the role it runs has returned) or cancelled.
    func run() async {
        var failures = 0
        while !Task.isCancelled && !GracefulStop.isRequested {
            let reachedPoweredOn = ClosedFlag()
            let emit: @Sendable (RoleEvent) -> Void = { event in
                if case .stateChanged(_, .poweredOn, _) = event { reachedPoweredOn.set() }
                report(.role(event))
            }
            let started = ContinuousClock.now
            var failure: (kind: FailureKind, message: String)?
            do {
                let session = try await openSession()
                defer { session.close() }
                try await attempt(session, emit)
            } catch {
                if Task.isCancelled || GracefulStop.isRequested || error is CancellationError { return }
                failure = Self.classify(error)
            }
            if reachedPoweredOn.isSet { failures = 0 }
            let delay: Duration
            if let failure {
                failures += 1
                delay = backoff.delay(afterFailures: failures)
                // Bluetooth's reason in status's words, with its fix, as the commands give it.
                let diagnosis = failure.kind == .unavailable || failure.kind == .permissionDenied ? await diagnose() : nil
                report(.waiting(kind: failure.kind, message: diagnosis?.message ?? failure.message, hint: diagnosis?.hint,
                                retryIn: delay))
            } else {
                // The role ended by itself (only when its task was interrupted): start it again, never in a tight loop.
                delay = max(.zero, minimumRestartInterval - (ContinuousClock.now - started))
            }
            // A stop cuts the pause short; the loop's condition then ends the run.
            guard await GracefulStop.sleep(for: delay) else { return }
        }
    }

    static func classify(_ error: any Error) -> (kind: FailureKind, message: String) {
        if let failure = error as? any ClassifiedFailure { return (failure.kind, failure.userMessage) }
        guard let bluetooth = BluetoothError.from(error) as? BluetoothError else {
            return (.software, "unexpected failure: \(error)")
        }
        if case .accessDenied = bluetooth { return (.permissionDenied, bluetooth.description) }
        return (.unavailable, bluetooth.description)
    }
}
