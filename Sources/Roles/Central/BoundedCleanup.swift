import Synchronization

/// Runs clean-up work (unsubscribe, disconnect, stop discovery) to completion even when the
/// calling task was cancelled — a torn-down transfer must still release the link — but never
/// longer than `limit`, so an unresponsive bluetoothd cannot hold the central.
///
/// The work runs in a fresh task, which does not inherit the caller's cancellation. When the
/// limit passes, that task is cancelled and abandoned: this returns at once, without waiting
/// for work that does not honour cancellation (a task group would wait for it).
func boundedCleanup(limit: Duration, _ work: @escaping @Sendable () async -> Void) async {
    let outcome = FirstOutcome<Void>()
    _ = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Void, any Error>, Never>) in
        outcome.install(continuation)
        // Unstructured on purpose (see above): the worker must not inherit cancellation, and the race must not wait for it.
        let worker = Task { await work() }
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            worker.cancel()
            outcome.resolve(.success(()))
        }
        Task {
            await worker.value
            timer.cancel()
            outcome.resolve(.success(()))
        }
    }
}

/// Runs `body`, throwing `onTimeout()` as soon as `limit` passes (the body is then cancelled and
/// abandoned, not waited for). Cancelling the caller cancels the body.
func withTimeLimit<T: Sendable>(_ limit: Duration, onTimeout: @escaping @Sendable () -> any Error,
                                _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = FirstOutcome<T>()
    let result = await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, any Error>, Never>) in
            outcome.install(continuation)
            // Unstructured on purpose (see above): the body is abandoned, not awaited, when the limit passes.
            let task = Task {
                do { outcome.resolve(.success(try await body())) } catch { outcome.resolve(.failure(error)) }
            }
            outcome.setWorker(task)
            let timer = Task {
                guard (try? await Task.sleep(for: limit)) != nil else { return }
                task.cancel()
                outcome.resolve(.failure(onTimeout()))
            }
            Task {
                await task.value
                timer.cancel()
            }
            // Cancelled before the worker existed: the handler below found nothing to cancel.
            if Task.isCancelled { task.cancel() }
        }
    } onCancel: {
        outcome.cancelWorker()
    }
    return try result.get()
}

/// The first of several racing results; later ones are dropped. The continuation is resumed
/// exactly once, inside the lock.
private final class FirstOutcome<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<T, any Error>, Never>?
        var early: Result<T, any Error>?
        var resolved = false
        /// The task running the body, cancelled when the caller is.
        var worker: Task<Void, Never>?
    }

    private let state = Mutex(State())

    func install(_ continuation: CheckedContinuation<Result<T, any Error>, Never>) {
        state.withLock { state in
            if let early = state.early {
                continuation.resume(returning: early)
            } else {
                state.continuation = continuation
            }
        }
    }

    func setWorker(_ task: Task<Void, Never>) {
        state.withLock { $0.worker = task }
    }

    func cancelWorker() {
        state.withLock { $0.worker }?.cancel()
    }

    func resolve(_ result: Result<T, any Error>) {
        state.withLock { state in
            guard !state.resolved else { return }
            state.resolved = true
            if let continuation = state.continuation {
                state.continuation = nil
                continuation.resume(returning: result)
            } else {
                state.early = result
            }
        }
    }
}
