import Synchronization

/// A wake-up call between a producer of "something changed" (the directory watcher) and a waiter, who reads
/// `generation`, looks at the world, then waits for it to move on: a change between looking and waiting is not lost.
final class ChangeSignal: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var nextWaiterID: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        /// Waiters whose timeout or cancellation came before they were registered.
        var endedEarly: Set<UInt64> = []
    }

    private let state = Mutex(State())

    var generation: UInt64 { state.withLock { $0.generation } }

    /// Records a change and wakes every waiter.
    func signal() {
        let waiters = state.withLock { state in
            state.generation &+= 1
            defer { state.waiters.removeAll() }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once the generation differs from `seen`, `timeout` passed, or the task is cancelled, whichever is first.
    func wait(after seen: UInt64, timeout: Duration) async {
        let id = state.withLock { state in
            state.nextWaiterID &+= 1
            return state.nextWaiterID
        }
        // Unstructured: the timer races the continuation below; it only ends this waiter and is cancelled when the wait ends.
        let timer = Task { [self] in
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            end(id)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state in
                    if state.generation != seen || state.endedEarly.remove(id) != nil { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            end(id)
        }
        timer.cancel()
        _ = await timer.value
        // The timer or the cancellation may have ended the wait after a signal already did.
        _ = state.withLock { $0.endedEarly.remove(id) }
    }

    private func end(_ id: UInt64) {
        let waiter = state.withLock { state in
            if let waiter = state.waiters.removeValue(forKey: id) { return Optional(waiter) }
            state.endedEarly.insert(id)
            return nil
        }
        waiter?.resume()
    }
}
