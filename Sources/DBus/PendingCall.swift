import Synchronization

/// One outgoing method call awaiting its reply. Finishes exactly once, whichever comes first: the reply (or libdbus's
/// timeout error), the caller's cancellation, or the connection closing.
///
/// `@unchecked Sendable`: `state` is a Mutex; `pendingCall` and `loop` are touched only on the reactor thread.
final class PendingCall: @unchecked Sendable {
    private enum State {
        case created
        case waiting(CheckedContinuation<Message, any Error>)
        /// Finished before the continuation was installed (cancelled early): the outcome waits.
        case finishedEarly(Result<Message, any Error>)
        case done
    }

    private let state = Mutex(State.created)
    /// The libdbus pending call while the reply is outstanding (loop thread only).
    var pendingCall: OpaquePointer?
    unowned(unsafe) let loop: EventLoop?

    init(loop: EventLoop) {
        self.loop = loop
    }

    /// Installs the continuation; resumes it at once if the call already finished.
    func install(_ continuation: CheckedContinuation<Message, any Error>) {
        let early = state.withLock { state -> Result<Message, any Error>? in
            switch state {
            case .created:
                state = .waiting(continuation)
                return nil
            case .finishedEarly(let result):
                state = .done
                return result
            case .waiting, .done:
                preconditionFailure("a pending call's continuation is installed once")
            }
        }
        if let early { continuation.resume(with: early) }
    }

    /// Finishes the call. Returns false when it had already finished (the outcome is dropped).
    @discardableResult
    func finish(_ result: Result<Message, any Error>) -> Bool {
        let continuation = state.withLock { state -> CheckedContinuation<Message, any Error>?? in
            switch state {
            case .created:
                state = .finishedEarly(result)
                return .some(nil)
            case .waiting(let continuation):
                state = .done
                return .some(continuation)
            case .finishedEarly, .done:
                return nil
            }
        }
        guard let continuation else { return false }
        continuation?.resume(with: result)
        return true
    }

    var isFinished: Bool {
        state.withLock { state in
            switch state {
            case .created, .waiting: false
            case .finishedEarly, .done: true
            }
        }
    }
}
