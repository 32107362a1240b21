import Foundation
@testable import Roles
import Transfer

/// Role events as they happen, with waits driven by the events themselves.
final class PeripheralEventLog: @unchecked Sendable {
    // @unchecked Sendable: `events`, `waiters` and `finished` are only touched under `lock`.
    private let lock = NSLock()
    private var events: [RoleEvent] = []
    private var waiters: [(predicate: @Sendable (RoleEvent) -> Bool, continuation: CheckedContinuation<Bool?, Never>)] = []
    private var finished = false
    private var finishWaiters: [CheckedContinuation<Void, Never>] = []

    init() {}

    /// Follows `stream` until it finishes.
    convenience init(following stream: AsyncStream<RoleEvent>) {
        self.init()
        Task {
            for await event in stream { self.append(event) }
            self.finish()
        }
    }

    func append(_ event: RoleEvent) {
        lock.lock()
        events.append(event)
        var ready: [CheckedContinuation<Bool?, Never>] = []
        waiters.removeAll { waiter in
            guard waiter.predicate(event) else { return false }
            ready.append(waiter.continuation)
            return true
        }
        lock.unlock()
        for continuation in ready { continuation.resume(returning: true) }
    }

    private func finish() {
        lock.lock()
        finished = true
        let pending = waiters
        waiters.removeAll()
        let done = finishWaiters
        finishWaiters.removeAll()
        lock.unlock()
        for waiter in pending { waiter.continuation.resume(returning: false) }
        for waiter in done { waiter.resume() }
    }

    var all: [RoleEvent] {
        lock.lock()
        defer { lock.unlock() }
        return events
    }

    /// Every event, once the stream finished.
    func allWhenFinished() async -> [RoleEvent] {
        await withCheckedContinuation { continuation in
            lock.lock()
            if finished {
                lock.unlock()
                continuation.resume()
            } else {
                finishWaiters.append(continuation)
                lock.unlock()
            }
        }
        return all
    }

    /// Returns true once `count` events matching `predicate` were emitted; false if the stream
    /// finished first.
    @discardableResult
    func waitFor(count: Int = 1, _ predicate: @escaping @Sendable (RoleEvent) -> Bool) async -> Bool {
        while true {
            let outcome: Bool? = await withCheckedContinuation { continuation in
                lock.lock()
                if events.filter(predicate).count >= count {
                    lock.unlock()
                    continuation.resume(returning: nil)
                } else if finished {
                    lock.unlock()
                    continuation.resume(returning: false)
                } else {
                    waiters.append((predicate, continuation))
                    lock.unlock()
                }
            }
            switch outcome {
            case nil: return true
            case false?: return false
            case true?: continue   // one more matched; check the count again
            }
        }
    }

    var abortReasons: [String] {
        all.compactMap { if case .transferAborted(_, let reason) = $0 { reason } else { nil } }
    }

    var subscribedFormats: [TransferFormat] {
        all.compactMap { if case .subscribed(_, _, let format) = $0 { format } else { nil } }
    }
}

extension RoleEvent {
    var isAdvertising: Bool { if case .advertising = self { true } else { false } }
    var deliveredSummary: MessageSummary? { if case .delivered(let summary, _) = self { summary } else { nil } }
}
