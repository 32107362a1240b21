import Synchronization

/// Starts `work` in a task of its own, which neither inherits the caller's cancellation nor is reached by it: the one
/// place for work that must run to its end after its caller was cancelled (a cancelled task cannot make the D-Bus calls
/// that release a link or unregister an object), and for work a race abandons rather than waits for.
package func startOutsideCancellation<T: Sendable>(
    _ work: @escaping @Sendable () async throws -> T
) -> Task<T, any Error> {
    // Unstructured: only a fresh task escapes the caller's cancellation (there is no cancellation shield), and a race must be able to abandon it.
    Task { try await work() }
}

/// Runs `work` to its end even when the calling task is cancelled meanwhile.
package func runOutsideCancellation(_ work: @escaping @Sendable () async -> Void) async {
    _ = await startOutsideCancellation(work).result
}

/// Runs clean-up work (unsubscribe, disconnect, stop discovery) to completion even when the
/// calling task was cancelled — a torn-down transfer must still release the link — but never
/// longer than `limit`, so an unresponsive bluetoothd cannot hold the central.
///
/// The work runs outside the caller's cancellation and reports its own end. When the limit
/// passes first, the work is cancelled and abandoned and this returns at once, without waiting
/// for work that does not honour cancellation (a task group would wait for it).
package func boundedCleanup(limit: Duration, _ work: @escaping @Sendable () async -> Void) async {
    let outcome = FirstOutcome<Void>()
    _ = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
        outcome.install(continuation)
        let worker = startOutsideCancellation {
            await work()
            outcome.resolve(.success(()))
        }
        outcome.startTimer(after: limit) {
            worker.cancel()
            outcome.resolve(.success(()))
        }
    }
}

/// Runs `body`, throwing `onTimeout()` as soon as `limit` passes (the body is then cancelled and
/// abandoned, not waited for). Cancelling the caller cancels the body.
package func withTimeLimit<T: Sendable>(_ limit: Duration, onTimeout: @escaping @Sendable () -> any Error,
                                _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = FirstOutcome<T>()
    let result = await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
            outcome.install(continuation)
            // Outside the caller's cancellation so the limit can abandon it; the handler below passes cancellation on.
            let worker = startOutsideCancellation {
                do { outcome.resolve(.success(try await body())) } catch { outcome.resolve(.failure(error)) }
            }
            outcome.setWorker { worker.cancel() }
            outcome.startTimer(after: limit) {
                // The limit's error first: cancelled first, the worker could resolve with its CancellationError.
                outcome.resolve(.failure(onTimeout()))
                worker.cancel()
            }
            // Cancelled before the worker existed: the handler below found nothing to cancel.
            if Task.isCancelled { worker.cancel() }
        }
    } onCancel: {
        outcome.cancelWorker()
    }
    return try result.get()
}

/// The first of several racing results; later ones are dropped. The continuation is resumed
/// exactly once, inside the lock. The first result also disarms the limit's timer.
private final class FirstOutcome<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<T, any Error>, Never>?
        var early: Result<T, any Error>?
        var resolved = false
        /// Cancels the task running the body; called when the caller is cancelled.
        var cancelWorker: (@Sendable () -> Void)?
        /// What the limit does when it passes first; dropped at the first result, so that the
        /// timer neither acts nor keeps what this captured alive until the limit.
        var onLimit: (@Sendable () -> Void)?
        var timer: Task<Void, Never>?
    }

    private let state = Mutex(State())

    func install(_ continuation: CheckedContinuation<Result<T, any Error>, Never>) {
        state.withLock { state in
            if let early = state.early {
                continuation.resume(returning: early)
            } else { state.continuation = continuation }
        }
    }

    func setWorker(_ cancel: @escaping @Sendable () -> Void) { state.withLock { $0.cancelWorker = cancel } }

    func cancelWorker() { state.withLock { $0.cancelWorker }?() }

    /// Runs `fire` once `limit` has passed, unless a result came first.
    func startTimer(after limit: Duration, _ fire: @escaping @Sendable () -> Void) {
        // Unstructured: the limit races the work and neither waits for the other; cancelled at the first result.
        let timer = Task { [weak self] in
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self?.limitPassed()
        }
        let armed = state.withLock { state in
            if !state.resolved {
                state.onLimit = fire
                state.timer = timer
            }
            return !state.resolved
        }
        if !armed { timer.cancel() }
    }

    private func limitPassed() {
        state.withLock { state in
            defer { state.onLimit = nil }
            return state.resolved ? nil : state.onLimit
        }?()
    }

    func resolve(_ result: Result<T, any Error>) {
        let timer: Task<Void, Never>? = state.withLock { state in
            guard !state.resolved else { return nil }
            state.resolved = true
            state.onLimit = nil
            state.cancelWorker = nil
            if let continuation = state.continuation {
                state.continuation = nil
                continuation.resume(returning: result)
            } else { state.early = result }
            defer { state.timer = nil }
            return state.timer
        }
        timer?.cancel()
    }
}
