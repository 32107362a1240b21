import DaemonSupport
import Logging
import ServiceLifecycle
import UnixSignals

/// The daemon's parts as swift-service-lifecycle services, run by one `ServiceGroup` in `Daemon.run`. The group
/// starts them together and, once `StopSignalService` returns, shuts the others down gracefully in reverse order: the
/// role first (it unregisters its advertisement and application, stops discovery and disconnects before it returns),
/// the watchdog last, so systemd keeps hearing from us while the role cleans up.

/// Waits for SIGTERM or SIGINT, reports which one, and returns: its configuration makes that return the group's
/// graceful shutdown. The group's own `gracefulShutdownSignals` would do the same without telling the daemon which
/// signal it was, which its log line and its last systemd status name.
struct StopSignalService: Service {
    let report: @Sendable (DaemonReport) -> Void

    func run() async throws {
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        // Cancelled (the group ended for another reason): nothing to report.
        for await signal in signals.cancelOnGracefulShutdown() {
            report(.stopping(signal: signal.rawValue))
            return
        }
    }
}

/// Keeps the role running (`DaemonSupervisor`) until the graceful shutdown, which the role
/// sees itself: it leaves its loops, releases its link, unregisters and returns, uncancelled.
struct RoleService: Service {
    let supervisor: DaemonSupervisor

    func run() async throws { await supervisor.run() }
}

/// Pings systemd's watchdog while the daemon lives; returns at once without a watchdog.
struct WatchdogService: Service {
    let notifier: SystemdNotifier
    let logger: Logger

    func run() async throws {
        let logger = self.logger
        await cancelWhenGracefulShutdown {
            await notifier.keepWatchdogAlive { error in
                logger.warning("watchdog ping failed", metadata: ["error": "\(error)"])
            }
        }
    }
}
