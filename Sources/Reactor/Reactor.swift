import CReactor
import Synchronization
import SystemCalls
import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

package struct ReadinessEvents: OptionSet, Sendable, Hashable, CustomStringConvertible {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Data to read (or end of stream).
    package static let readable = ReadinessEvents(rawValue: 1)
    package static let writable = ReadinessEvents(rawValue: 2)
    /// Error and hang-up are always reported, never asked for.
    package static let error = ReadinessEvents(rawValue: 4)
    package static let hangUp = ReadinessEvents(rawValue: 8)

    private static let names: [(ReadinessEvents, UInt32, String)] = [
        (.readable, CREACTOR_READABLE, "readable"), (.writable, CREACTOR_WRITABLE, "writable"),
        (.error, CREACTOR_ERROR, "error"), (.hangUp, CREACTOR_HANGUP, "hangUp"),
    ]

    var epollMask: UInt32 {
        // The first two, readable and writable, are the ones asked for.
        Self.names.prefix(2).reduce(0) { mask, entry in contains(entry.0) ? mask | entry.1 : mask }
    }

    init(epollEvents: UInt32) {
        self.init(Self.names.filter { epollEvents & $0.1 != 0 }.map(\.0))
    }

    package var description: String {
        "[" + Self.names.filter { contains($0.0) }.map(\.2).joined(separator: ", ") + "]"
    }
}

/// The process's one readiness loop: a thread in `epoll_wait` for every descriptor the process waits on (D-Bus
/// sockets, notification sockets, L2CAP channels, the outbox's inotify descriptor), the nearest timer, and an eventfd
/// that wakes it for jobs. Nothing else blocks waiting for I/O: no other thread polls, no pool task blocks.
///
/// - An *interest* is a descriptor and the events wanted on it, its handler run (level-triggered) each time they are
///   ready; its events may change or go to none (disabled) while registered. Several interests may share a
///   descriptor (libdbus watches one socket for reading and, separately, for writing).
/// - A one-shot `ReadinessWait` is an interest removed when it first fires; its awaiter resumes only once the interest
///   left the epoll set, so the descriptor may be closed at once.
///
/// Members marked "reactor thread only" are for code already running there (jobs, hooks, handlers); others enqueue.
///
/// `@unchecked Sendable`: the fields marked "reactor thread only" are touched only on the reactor thread; the job
/// queue, the only state other threads reach, is a Mutex; the two descriptors are immutable.
package final class Reactor: @unchecked Sendable {
    package typealias Job = @Sendable () -> Void
    /// Handlers, timers and hooks run on the reactor thread and are registered there: they need not be Sendable.
    package typealias ReadinessHandler = (ReadinessEvents) -> Void

    package struct Registration: Hashable, Sendable {
        fileprivate let id: UInt64
    }

    private struct Queue {
        var jobs: [Job] = []
        var wakeUpPending = false
    }

    private struct Interest {
        let fd: Int32
        var events: ReadinessEvents
        let oneShot: Bool
        let handler: ReadinessHandler
    }

    private struct Timer {
        let deadline: ContinuousClock.Instant
        let handler: () -> Void
    }

    private let queue = Mutex(Queue())
    private let epollFD: Int32
    private let wakeUpFD: Int32
    private let thread = Atomic<UInt>(0)

    // Reactor thread only.
    private var nextID: UInt64 = 1
    private var interests: [UInt64: Interest] = [:]
    /// Per descriptor: its interests in registration order, and epoll's mask for it (0: not in the epoll set, as when
    /// every interest is disabled: epoll would still report errors and hang-ups, level-triggered, for nobody).
    private var descriptors: [Int32: (interests: [UInt64], registeredMask: UInt32)] = [:]
    private var timers: [UInt64: Timer] = [:]
    private var hooks: [(id: UInt64, hook: () -> Void)] = []

    // MARK: The shared reactor

    /// The process's reactor, started on first use. Throws (each time, the same error) when the kernel refused its
    /// epoll instance, eventfd or thread.
    package static func shared() throws(SystemCallError) -> Reactor { try sharedReactor.get() }

    private static let sharedReactor: Result<Reactor, SystemCallError> = Result { () throws(SystemCallError) in
        try Reactor()
    }

    /// A reactor with its own thread, for the life of the process: for tests that must hold one up (all else uses
    /// `shared()`).
    package init() throws(SystemCallError) {
        let epoll = creactor_epoll_create()
        guard epoll >= 0 else { throw Self.failure("epoll_create1", errno) }
        let wakeUp = creactor_eventfd_create()
        guard wakeUp >= 0 else { throw Self.failure("eventfd", errno, closing: epoll) }
        guard creactor_epoll_control(epoll, CREACTOR_ADD, wakeUp, CREACTOR_READABLE) == 0 else {
            throw Self.failure("epoll_ctl(ADD)", errno, closing: wakeUp, epoll)
        }
        epollFD = epoll
        wakeUpFD = wakeUp

        var thread = pthread_t()
        // The thread holds the reactor for as long as it runs, which is for good.
        let box = Unmanaged.passRetained(self).toOpaque()
        let result = pthread_create(&thread, nil, { argument in
            let reactor = Unmanaged<Reactor>.fromOpaque(argument!).takeRetainedValue()
            reactor.run()
            return nil
        }, box)
        guard result == 0 else {
            Unmanaged<Reactor>.fromOpaque(box).release()
            throw Self.failure("pthread_create", result, closing: wakeUp, epoll)
        }
        pthread_detach(thread)
    }

    /// `call`'s error (`code`, read before the arguments' descriptors are closed).
    private static func failure(_ call: String, _ code: Int32, closing descriptors: Int32...) -> SystemCallError {
        for fd in descriptors { _ = close(fd) }
        return SystemCallError(call: call, errno: Errno(rawValue: code))
    }

    package var isReactorThread: Bool { thread.load(ordering: .acquiring) == currentThreadID() }

    // MARK: Jobs

    /// Runs `job` on the reactor thread, after the jobs queued before it.
    package func enqueue(_ job: @escaping Job) {
        let mustWake = queue.withLock { queue -> Bool in
            queue.jobs.append(job)
            defer { queue.wakeUpPending = true }
            return !queue.wakeUpPending
        }
        if mustWake { creactor_eventfd_signal(wakeUpFD) }
    }

    /// Makes the reactor go round once more (run its hooks) without a job; from any thread.
    package func wakeUp() { creactor_eventfd_signal(wakeUpFD) }

    private func runQueuedJobs() {
        let jobs = queue.withLock { queue -> [Job] in
            queue.wakeUpPending = false
            defer { queue.jobs.removeAll(keepingCapacity: true) }
            return queue.jobs
        }
        for job in jobs { job() }
    }

    // MARK: Interests (reactor thread only)

    /// Registers `handler` for `events` on `fd` (none: registered but disabled); a one-shot interest is removed when
    /// it first fires. Throws when epoll refuses the descriptor (closed, or a kind it cannot watch, such as a file).
    package func addInterest(
        fd: Int32, events: ReadinessEvents, oneShot: Bool = false, handler: @escaping ReadinessHandler
    ) throws(SystemCallError) -> Registration {
        assertOnReactorThread()
        let id = takeID()
        interests[id] = Interest(fd: fd, events: events, oneShot: oneShot, handler: handler)
        descriptors[fd, default: ([], 0)].interests.append(id)
        do throws(SystemCallError) {
            // Always told to epoll, even when the mask looks unchanged: a descriptor closed with its interests still
            // registered left the epoll set, and its number may since name another file.
            try updateMask(of: fd, force: true)
        } catch {
            removeInterestRecord(id)
            throw error
        }
        return Registration(id: id)
    }

    /// Changes what an interest waits for; none disables it. Nothing when it is gone.
    package func setEvents(_ events: ReadinessEvents, of registration: Registration) {
        assertOnReactorThread()
        guard let fd = interests[registration.id]?.fd else { return }
        interests[registration.id]?.events = events
        // A descriptor the epoll set lost (closed under us) cannot be re-added: its interests just will not fire.
        try? updateMask(of: fd)
    }

    /// Removes an interest; its handler will not run again. Nothing when it is already gone.
    package func removeInterest(_ registration: Registration) {
        assertOnReactorThread()
        guard let fd = interests[registration.id]?.fd else { return }
        removeInterestRecord(registration.id)
        try? updateMask(of: fd)
    }

    private func removeInterestRecord(_ id: UInt64) {
        guard let fd = interests.removeValue(forKey: id)?.fd else { return }
        descriptors[fd]?.interests.removeAll { $0 == id }
    }

    private func updateMask(of fd: Int32, force: Bool = false) throws(SystemCallError) {
        guard let entry = descriptors[fd] else { return }
        let wanted = entry.interests.reduce(UInt32(0)) { mask, id in mask | (interests[id]?.events.epollMask ?? 0) }
        if entry.interests.isEmpty { descriptors[fd] = nil }
        guard wanted != entry.registeredMask || (force && wanted != 0) else { return }
        let (operation, name): (Int32, String) =
            if wanted == 0 { (CREACTOR_DELETE, "epoll_ctl(DEL)") }
            else if entry.registeredMask == 0 { (CREACTOR_ADD, "epoll_ctl(ADD)") }
            else { (CREACTOR_MODIFY, "epoll_ctl(MOD)") }
        var result = creactor_epoll_control(epollFD, operation, fd, wanted)
        var failure = result == 0 ? 0 : errno
        if failure == ENOENT && operation == CREACTOR_MODIFY {
            // The descriptor was closed and its number reused since it was added: start over.
            result = creactor_epoll_control(epollFD, CREACTOR_ADD, fd, wanted)
            failure = result == 0 ? 0 : errno
        }
        if operation == CREACTOR_DELETE && (failure == ENOENT || failure == EBADF) {
            // Closing the descriptor already took it out of the epoll set.
            failure = 0
        }
        descriptors[fd]?.registeredMask = failure == 0 ? wanted : 0
        if failure != 0 { throw SystemCallError(call: name, errno: Errno(rawValue: failure)) }
    }

    // MARK: Timers and hooks (reactor thread only)

    /// Runs `handler` once at `deadline` (next turn if passed); timers expiring together run in deadline order, ties
    /// in the order added.
    @discardableResult
    package func addTimer(at deadline: ContinuousClock.Instant, handler: @escaping () -> Void) -> Registration {
        assertOnReactorThread()
        let id = takeID()
        timers[id] = Timer(deadline: deadline, handler: handler)
        return Registration(id: id)
    }

    package func removeTimer(_ registration: Registration) {
        assertOnReactorThread()
        timers[registration.id] = nil
    }

    /// Runs `hook` every turn, after the jobs and before the wait (libdbus dispatches what its watches read). A hook
    /// that finds more to do later calls `wakeUp()` rather than looping.
    package func addHook(_ hook: @escaping () -> Void) -> Registration {
        assertOnReactorThread()
        let id = takeID()
        hooks.append((id, hook))
        return Registration(id: id)
    }

    package func removeHook(_ registration: Registration) {
        assertOnReactorThread()
        hooks.removeAll { $0.id == registration.id }
    }

    private func takeID() -> UInt64 {
        defer { nextID += 1 }
        return nextID
    }

    private func assertOnReactorThread() {
        assert(isReactorThread, "a reactor-thread-only member was used on another thread")
    }

    /// Interests, descriptors in the epoll set and timers now (for tests: what a cancelled wait leaves). Reactor
    /// thread only.
    package var registrationCounts: (interests: Int, descriptors: Int, timers: Int) {
        assertOnReactorThread()
        return (interests.count, descriptors.values.filter { $0.registeredMask != 0 }.count, timers.count)
    }

    // MARK: The thread

    private func run() {
        thread.store(currentThreadID(), ordering: .releasing)
        var readyFDs = [Int32](repeating: 0, count: Int(CREACTOR_MAX_EVENTS))
        var readyEvents = [UInt32](repeating: 0, count: Int(CREACTOR_MAX_EVENTS))
        while true {
            runQueuedJobs()
            for id in hooks.map(\.id) {
                // A hook may remove itself or another.
                guard let hook = hooks.first(where: { $0.id == id })?.hook else { continue }
                hook()
            }

            let jobsWaiting = queue.withLock { !$0.jobs.isEmpty }
            let timeout = jobsWaiting ? 0 : waitTimeoutMilliseconds()
            let result = retryingInterrupts {
                readyFDs.withUnsafeMutableBufferPointer { fds in
                    readyEvents.withUnsafeMutableBufferPointer { events in
                        Int(creactor_epoll_wait(epollFD, fds.baseAddress, events.baseAddress, timeout))
                    }
                }
            }
            guard case .completed(let count) = result else {
                // epoll_wait fails only for invalid arguments, which these are not; go round rather than lose waiters.
                continue
            }
            for index in 0..<count {
                let fd = readyFDs[index]
                if fd == wakeUpFD {
                    creactor_eventfd_drain(wakeUpFD)
                    continue
                }
                handleReadiness(of: fd, ReadinessEvents(epollEvents: readyEvents[index]))
            }
            fireExpiredTimers()
        }
    }

    private func handleReadiness(of fd: Int32, _ ready: ReadinessEvents) {
        guard let entry = descriptors[fd], entry.registeredMask != 0 else {
            // Nothing of ours is on it, yet epoll holds it (closed while a duplicate keeps the file open): take it out,
            // or level-triggered epoll would report it every turn.
            _ = creactor_epoll_control(epollFD, CREACTOR_DELETE, fd, 0)
            return
        }
        for id in entry.interests {
            // An earlier handler may have removed or disabled this one.
            guard let interest = interests[id], !interest.events.isEmpty else { continue }
            let relevant = ready.intersection(interest.events.union([.error, .hangUp]))
            guard !relevant.isEmpty else { continue }
            if interest.oneShot {
                removeInterestRecord(id)
                try? updateMask(of: fd)
            }
            interest.handler(relevant)
        }
    }

    private func waitTimeoutMilliseconds() -> Int32 {
        guard let nearest = timers.values.lazy.map(\.deadline).min() else { return -1 }
        let remaining = ContinuousClock.now.duration(to: nearest)
        if remaining <= .zero { return 0 }
        return Int32(clamping: remaining.millisecondsRoundedUp)
    }

    private func fireExpiredTimers() {
        guard !timers.isEmpty else { return }
        let now = ContinuousClock.now
        let expired = timers.filter { $0.value.deadline <= now }
            .sorted { ($0.value.deadline, $0.key) < ($1.value.deadline, $1.key) }
        for (id, _) in expired {
            // An earlier handler may have removed this timer.
            guard let timer = timers.removeValue(forKey: id) else { continue }
            timer.handler()
        }
    }
}

private func currentThreadID() -> UInt {
    UInt(pthread_self())  // glibc's pthread_t is an unsigned long
}

// MARK: Waiting from any thread

extension Reactor {
    /// A lasting interest, from any thread (the registration itself is a job).
    package func watch(
        fd: Int32, events: ReadinessEvents, handler: @escaping @Sendable (ReadinessEvents) -> Void
    ) -> PersistentInterest {
        PersistentInterest(reactor: self, fd: fd, events: events, handler: handler)
    }
}

/// One wait for a descriptor's readiness, registered as soon as made and removed when it first fires. It ends exactly
/// once: ready, failed (epoll refused the descriptor), or through `cancel(throwing:)` (the awaiting task's
/// cancellation uses CancellationError). Either way its interest is off the epoll set before the awaiter resumes.
///
/// `@unchecked Sendable`: `state` is a Mutex; `registration` is touched on the reactor thread only (jobs, handler).
package final class ReadinessWait: @unchecked Sendable {
    private struct State {
        var continuation: CheckedContinuation<ReadinessEvents, any Error>?
        var outcome: Result<ReadinessEvents, any Error>?
        /// Set by `cancel(throwing:)`: the error the wait ends with, whatever comes first.
        var cancellation: (any Error)?
    }

    private let reactor: Reactor
    private let state = Mutex(State())
    // Reactor thread only.
    private var registration: Reactor.Registration?

    package init(reactor: Reactor, fd: Int32, events: ReadinessEvents) {
        self.reactor = reactor
        reactor.enqueue { [self] in
            guard state.withLock({ $0.cancellation == nil }) else { return }  // the cancel job ends it
            do {
                registration = try reactor.addInterest(fd: fd, events: events, oneShot: true) { [self] ready in
                    registration = nil
                    finish(.success(ready))
                }
            } catch {
                finish(.failure(error))
            }
        }
    }

    /// Ends the wait with `error` unless it already ended: the interest is removed, then an awaiter resumes. Any thread.
    package func cancel(throwing error: any Error) {
        let first = state.withLock { state -> Bool in
            guard state.outcome == nil, state.cancellation == nil else { return false }
            state.cancellation = error
            return true
        }
        guard first else { return }
        reactor.enqueue { [self] in
            if let registration { reactor.removeInterest(registration) }
            registration = nil
            finish(.failure(error))
        }
    }

    /// Reactor thread: the interest is gone; resume the awaiter (a cancellation that came first wins over readiness).
    private func finish(_ result: Result<ReadinessEvents, any Error>) {
        let continuation = state.withLock { state -> CheckedContinuation<ReadinessEvents, any Error>?? in
            guard state.outcome == nil else { return nil }
            let outcome = state.cancellation.map { Result.failure($0) } ?? result
            state.outcome = outcome
            defer { state.continuation = nil }
            return .some(state.continuation)
        }
        guard let continuation, let continuation else { return }
        continuation.resume(with: state.withLock { $0.outcome! })
    }

    /// The readiness the wait ended with; awaited once. Cancelling the awaiting task cancels the wait.
    package var value: ReadinessEvents {
        get async throws {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ReadinessEvents, any Error>) in
                    let outcome = state.withLock { state -> Result<ReadinessEvents, any Error>? in
                        if let outcome = state.outcome { return outcome }
                        state.continuation = continuation
                        return nil
                    }
                    if let outcome { continuation.resume(with: outcome) }
                }
            } onCancel: {
                cancel(throwing: CancellationError())
            }
        }
    }
}

/// A lasting interest registered from any thread: its handler runs on the reactor thread each time the descriptor is
/// ready, until `cancel(then:)`. Should epoll refuse the descriptor, the handler hears `.error` once.
///
/// `@unchecked Sendable`: `registration` and `cancelled` are touched on the reactor thread only.
package final class PersistentInterest: @unchecked Sendable {
    private let reactor: Reactor
    // Reactor thread only.
    private var registration: Reactor.Registration?
    private var cancelled = false

    fileprivate init(
        reactor: Reactor, fd: Int32, events: ReadinessEvents, handler: @escaping @Sendable (ReadinessEvents) -> Void
    ) {
        self.reactor = reactor
        reactor.enqueue { [self] in
            guard !cancelled else { return }
            do {
                registration = try reactor.addInterest(fd: fd, events: events, handler: handler)
            } catch {
                handler(.error)
            }
        }
    }

    /// Removes the interest, then runs `then` on the reactor thread (where closing the descriptor is safe: no handler
    /// runs any more and epoll no longer holds it). Any thread.
    package func cancel(then: (@Sendable () -> Void)? = nil) {
        reactor.enqueue { [self] in
            cancelled = true
            if let registration { reactor.removeInterest(registration) }
            registration = nil
            then?()
        }
    }
}
