import Synchronization

/// The central's writes to a secure session, readable both ways the transfer task needs: taken
/// without waiting between notifications (a RESUME must be read while DATA flows, not after),
/// and awaited when the session pauses (handshake message 2, an ACK, a PROGRESS).
///
/// `interrupt()` (the central hung up) ends the waits that only a live central could end —
/// handshake message 2, a PROGRESS — while a wait for an ACK goes on: an ACK written just
/// before the hang-up may still be on its way (a D-Bus call racing a socket event), and the
/// ACK timeout bounds that wait.
///
/// The server posts each write straight in (`post`), from the actor that took it from BlueZ.
/// Bounded: a central writing more than `limit` values before they are read loses the excess,
/// and its session then fails on the gap in sequence numbers.
final class WriteInbox: Sendable {
    private struct State {
        var values: [[UInt8]] = []
        var finished = false
        var interrupted = false
        var waiter: CheckedContinuation<[UInt8]?, Never>?
        var waiterInterruptible = false
    }

    private let state = Mutex(State())
    let limit: Int

    init(limit: Int) { self.limit = limit }

    func post(_ value: [UInt8]) {
        let waiter: CheckedContinuation<[UInt8]?, Never>? = state.withLock { state in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            if state.values.count < limit { state.values.append(value) }
            return nil
        }
        waiter?.resume(returning: value)
    }

    func finish() {
        let waiter = state.withLock { state in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The central hung up: an interruptible wait, now or later, ends (nil) once the values
    /// already written are taken.
    func interrupt() {
        let waiter: CheckedContinuation<[UInt8]?, Never>? = state.withLock { state in
            state.interrupted = true
            guard state.waiterInterruptible, let waiter = state.waiter else { return nil }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: nil)
    }

    /// The values written so far, without waiting.
    func takeAvailable() -> [[UInt8]] {
        state.withLock { state in
            defer { state.values = [] }
            return state.values
        }
    }

    /// The next value, waiting for it; nil once the writes ended or the task is cancelled, and
    /// with `interruptible` also once the central hung up (`interrupt`).
    func next(interruptible: Bool = false) async -> [UInt8]? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8]?, Never>) in
                let ready: [UInt8]?? = state.withLock { state in
                    if !state.values.isEmpty { return .some(state.values.removeFirst()) }
                    if state.finished || Task.isCancelled || (interruptible && state.interrupted) { return .some(nil) }
                    state.waiter = continuation
                    state.waiterInterruptible = interruptible
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            finish()
        }
    }
}
