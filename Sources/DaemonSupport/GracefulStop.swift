import ServiceLifecycle

/// How a role (or any long-running loop) is asked to stop: the graceful shutdown of the swift-service-lifecycle
/// `ServiceGroup` it runs in (the commands' SIGINT, SIGTERM or `--timeout`, the daemon's SIGTERM). The request
/// travels as a task-local, so every loop of the role sees it without being handed anything; outside a service group
/// it never comes and only cancellation stops a role.
///
/// A stop is not a cancellation: the role leaves its loops at the next input, then runs its teardown (unsubscribe,
/// disconnect, stop discovery, unregister) in its own task, whose calls to bluetoothd are bounded by their per-call
/// timeouts, so nothing has to escape a cancelled task to reach bluetoothd.
package enum GracefulStop {
    /// A stop has been asked for; it stays asked for.
    package static var isRequested: Bool { Task.isShuttingDownGracefully }

    /// Sleeps `duration`, less when a stop is asked for or the task is cancelled; true when it all passed.
    package static func sleep(for duration: Duration) async -> Bool {
        guard !isRequested else { return false }
        // Cancelling the sleep is all a stop has to do here; the caller's task stays uncancelled.
        return (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: duration) }) != nil
    }

    /// Runs `wait` until it returns, or until a stop is asked for, which cancels `wait` alone (never the caller): for
    /// waits with no bound of their own, such as the next message of an outbox. Returns nil when the stop came first.
    package static func unlessRequested<Value: Sendable>(_ wait: @escaping @Sendable () async -> Value) async -> Value? {
        guard !isRequested else { return nil }
        let value = await cancelWhenGracefulShutdown { await wait() }
        return isRequested ? nil : value
    }
}

/// Thrown by a loop that left because a stop was asked for (``GracefulStop``), so that what it
/// leaves runs its teardown and ends the period as interrupted, not failed.
package struct StopRequested: Error {
    package init() {}
}

extension InputProducer {
    /// Yields `stop` once a stop is asked for: the merging loop leaves at its next input, tears down uncancelled.
    package static func stopRequest(_ stop: Input) -> Self {
        Self { input in
            // Throws only when the loop has left (its producers are cancelled): nothing to tell.
            guard (try? await gracefulShutdown()) != nil else { return }
            input.yield(stop)
        }
    }
}
