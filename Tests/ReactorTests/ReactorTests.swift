import Reactor
import Synchronization
import SystemCalls
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension Reactor {
    /// Returns once `fd` is readable (or has an error or hung up), through a one-shot `ReadinessWait`.
    func readable(_ fd: Int32) async throws -> ReadinessEvents {
        try await ReadinessWait(reactor: self, fd: fd, events: .readable).value
    }

    /// Returns once `fd` has room to write (or has an error or hung up).
    func writable(_ fd: Int32) async throws -> ReadinessEvents {
        try await ReadinessWait(reactor: self, fd: fd, events: .writable).value
    }
}

/// A pipe whose ends are closed when the value goes.
private final class Pipe: Sendable {
    let readEnd: Int32
    let writeEnd: Int32

    init() throws {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else {
            throw SystemCallError(call: "pipe", errno: .init(rawValue: errno))
        }
        for fd in fds { _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) }
        readEnd = fds[0]
        writeEnd = fds[1]
    }

    /// Writes `count` bytes in one call.
    func write(count: Int = 1) {
        let bytes = [UInt8](repeating: 1, count: count)
        _ = bytes.withUnsafeBytes { Glibc.write(writeEnd, $0.baseAddress, $0.count) }
    }

    /// Reads what is there; the count read.
    @discardableResult
    func drain() -> Int {
        var buffer = [UInt8](repeating: 0, count: 256)
        var total = 0
        while true {
            let count = buffer.withUnsafeMutableBytes { Glibc.read(readEnd, $0.baseAddress, $0.count) }
            guard count > 0 else { return total }
            total += count
        }
    }

    deinit {
        close(readEnd)
        close(writeEnd)
    }
}

/// Runs `body` on the reactor thread and returns its result.
private func onReactor<T: Sendable>(_ reactor: Reactor, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        reactor.enqueue { continuation.resume(returning: body()) }
    }
}

/// What is registered on the reactor, read on its thread after everything queued before.
private func counts(_ reactor: Reactor) async -> (interests: Int, descriptors: Int, timers: Int) {
    let counts = await onReactor(reactor) {
        let counts = reactor.registrationCounts
        return [counts.interests, counts.descriptors, counts.timers]
    }
    return (counts[0], counts[1], counts[2])
}

/// Collects values from any thread.
private final class Record<Value: Sendable>: Sendable {
    private let values = Mutex<[Value]>([])
    func append(_ value: Value) { values.withLock { $0.append(value) } }
    var all: [Value] { values.withLock { $0 } }
}

// Each test runs its own reactor (tests run in parallel, and some count what is registered);
// the process's shared one serves the D-Bus and socket tests.
@Suite("Reactor")
struct ReactorTests {
    @Test("the shared reactor is one, and runs jobs")
    func shared() async throws {
        let reactor = try Reactor.shared()
        #expect(try Reactor.shared() === reactor)
        #expect(await onReactor(reactor) { reactor.isReactorThread })
    }

    @Test("a pipe's read end is readable once written, and its write end writable at once")
    func pipeReadiness() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        #expect(try await reactor.writable(pipe.writeEnd).contains(.writable))
        async let ready = reactor.readable(pipe.readEnd)
        try await Task.sleep(for: .milliseconds(10))
        pipe.write()
        #expect(try await ready.contains(.readable))
        #expect(pipe.drain() == 1)
    }

    @Test("a closed write end makes the read end report a hang-up")
    func hangUp() async throws {
        let reactor = try Reactor()
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        close(fds[1])
        #expect(try await reactor.readable(fds[0]).contains(.hangUp))
    }

    @Test("a cancelled wait resumes promptly with CancellationError and leaves nothing registered")
    func cancellation() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        let before = await counts(reactor)
        let waiting = Task { try await reactor.readable(pipe.readEnd) }
        // Registered: the wait's registration job has run once a later job runs.
        while await counts(reactor).interests == before.interests { await Task.yield() }
        // The pipe is never written: only the cancellation can end the wait.
        waiting.cancel()
        await #expect(throws: CancellationError.self) { try await waiting.value }
        let after = await counts(reactor)
        #expect(after.interests == before.interests)
        #expect(after.descriptors == before.descriptors)
    }

    @Test("a wait cancelled before it starts never registers")
    func cancelledBeforeStart() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        let before = await counts(reactor)
        let waiting = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await reactor.readable(pipe.readEnd)
        }
        await #expect(throws: CancellationError.self) { try await waiting.value }
        #expect(await counts(reactor).interests == before.interests)
    }

    @Test("a wait cancelled with an error of the caller's ends with that error")
    func cancelWithError() async throws {
        struct Closed: Error {}
        let reactor = try Reactor()
        let pipe = try Pipe()
        let wait = ReadinessWait(reactor: reactor, fd: pipe.readEnd, events: .readable)
        wait.cancel(throwing: Closed())
        await #expect(throws: Closed.self) { try await wait.value }
    }

    @Test("a descriptor epoll refuses fails the wait with the call and errno")
    func refusedDescriptor() async throws {
        let reactor = try Reactor()
        await #expect(throws: SystemCallError.self) { try await reactor.readable(-1) }
    }

    @Test("timers fire in deadline order, ties in the order they were added")
    func timersInOrder() async throws {
        let reactor = try Reactor()
        let order = Record<Int>()
        let start = ContinuousClock.now
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            reactor.enqueue {
                reactor.addTimer(at: start + .milliseconds(30)) { order.append(3) }
                reactor.addTimer(at: start + .milliseconds(10)) { order.append(1) }
                reactor.addTimer(at: start + .milliseconds(20)) { order.append(2) }
                reactor.addTimer(at: start + .milliseconds(20)) { order.append(22) }
                let removed = reactor.addTimer(at: start + .milliseconds(15)) { order.append(-1) }
                reactor.removeTimer(removed)
                reactor.addTimer(at: start + .milliseconds(40)) { done.resume() }
            }
        }
        #expect(order.all == [1, 2, 22, 3])
        #expect(ContinuousClock.now - start >= .milliseconds(40))
    }

    @Test("a timer scheduled from another thread wakes a reactor waiting for nothing else")
    func scheduledTimer() async throws {
        let reactor = try Reactor()
        let start = ContinuousClock.now
        // Measured on the reactor thread: resuming the test's task may wait for a busy pool.
        let elapsed = await withCheckedContinuation { (done: CheckedContinuation<Duration, Never>) in
            reactor.schedule(at: start + .milliseconds(25)) { done.resume(returning: ContinuousClock.now - start) }
        }
        #expect(elapsed >= .milliseconds(25))
        #expect(elapsed < .seconds(2))
    }

    @Test("many waits at once each end when their own pipe is written")
    func manyWaits() async throws {
        let reactor = try Reactor()
        let pipes = try (0..<200).map { _ in try Pipe() }
        let before = await counts(reactor)
        try await withThrowingTaskGroup(of: Int.self) { group in
            for (index, pipe) in pipes.enumerated() {
                group.addTask {
                    let ready = try await reactor.readable(pipe.readEnd)
                    #expect(ready.contains(.readable))
                    #expect(pipe.drain() == 1)
                    return index
                }
            }
            while await counts(reactor).interests < before.interests + pipes.count { await Task.yield() }
            for pipe in pipes.reversed() { pipe.write() }
            var finished = Set<Int>()
            for try await index in group { finished.insert(index) }
            #expect(finished.count == pipes.count)
        }
        #expect(await counts(reactor).interests == before.interests)
    }

    @Test("a read and a write wait on one descriptor each end on their own event")
    func sharedDescriptor() async throws {
        let reactor = try Reactor()
        var fds: [Int32] = [-1, -1]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let end = fds[0]
        let reading = Task { try await reactor.readable(end) }
        #expect(try await reactor.writable(fds[0]).contains(.writable))
        var byte: UInt8 = 7
        _ = write(fds[1], &byte, 1)
        #expect(try await reading.value.contains(.readable))
    }

    @Test("a lasting interest fires each time its descriptor becomes ready, until cancelled")
    func persistentInterest() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        let fired = AsyncStream<Int>.makeStream()
        let interest = reactor.watch(fd: pipe.readEnd, events: .readable) { _ in
            fired.continuation.yield(pipe.drain())
        }
        var iterator = fired.stream.makeAsyncIterator()
        for round in 1...3 {
            pipe.write(count: round)
            #expect(await iterator.next() == round)
        }
        let before = await counts(reactor)
        let closedOnReactor = Mutex(false)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            interest.cancel {
                closedOnReactor.withLock { $0 = reactor.isReactorThread }
                done.resume()
            }
        }
        #expect(closedOnReactor.withLock { $0 })
        #expect(await counts(reactor).interests == before.interests - 1)
        pipe.write()   // no handler any more
        try await Task.sleep(for: .milliseconds(20))
        #expect(pipe.drain() == 1)
    }

    @Test("a disabled interest stays registered but does not fire; enabling it again does")
    func disabledInterest() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        pipe.write()
        let fired = Record<ReadinessEvents>()
        let registration = try await onReactor(reactor) {
            Result { () throws(SystemCallError) in
                try reactor.addInterest(fd: pipe.readEnd, events: []) { fired.append($0) }
            }
        }.get()
        try await Task.sleep(for: .milliseconds(20))
        #expect(fired.all.isEmpty)
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            reactor.enqueue {
                reactor.setEvents(.readable, of: registration)
                // One turn: the next wait sees the pipe readable; the timer lets the test go on.
                reactor.addTimer(at: .now + .milliseconds(20)) {
                    reactor.removeInterest(registration)
                    done.resume()
                }
            }
        }
        #expect(!fired.all.isEmpty)
        #expect(fired.all.allSatisfy { $0 == .readable })
    }

    @Test("jobs run on the reactor thread, in the order queued")
    func jobsOnReactorThread() async throws {
        let reactor = try Reactor()
        #expect(!reactor.isReactorThread)
        let order = Record<Int>()
        let onThread = Record<Bool>()
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            for index in 0..<100 {
                reactor.enqueue {
                    order.append(index)
                    onThread.append(reactor.isReactorThread)
                }
            }
            reactor.enqueue { done.resume() }
        }
        #expect(order.all == Array(0..<100))
        #expect(onThread.all.allSatisfy { $0 })
    }

    @Test("hooks run every turn until removed")
    func hooks() async throws {
        let reactor = try Reactor()
        let turns = Mutex(0)
        let registration = await onReactor(reactor) {
            reactor.addHook { turns.withLock { $0 += 1 } }
        }
        let start = turns.withLock { $0 }
        for _ in 0..<3 { reactor.wakeUp(); _ = await onReactor(reactor) { 0 } }
        #expect(turns.withLock { $0 } >= start + 3)
        _ = await onReactor(reactor) { reactor.removeHook(registration) }
        let end = turns.withLock { $0 }
        for _ in 0..<3 { reactor.wakeUp(); _ = await onReactor(reactor) { 0 } }
        #expect(turns.withLock { $0 } == end)
    }

    @Test("a ready descriptor's handler runs soon after the write that makes it ready")
    func wakeLatency() async throws {
        let reactor = try Reactor()
        let pipe = try Pipe()
        let written = Mutex<ContinuousClock.Instant?>(nil)
        let latencies = AsyncStream<Duration>.makeStream()
        // Measured on the reactor thread, from just before the write to the handler.
        let interest = reactor.watch(fd: pipe.readEnd, events: .readable) { _ in
            let now = ContinuousClock.now
            pipe.drain()
            if let start = written.withLock({ $0.take() }) { latencies.continuation.yield(now - start) }
        }
        defer { interest.cancel() }
        var iterator = latencies.stream.makeAsyncIterator()
        var measured: [Duration] = []
        for _ in 0..<200 {
            written.withLock { $0 = .now }
            pipe.write()
            if let latency = await iterator.next() { measured.append(latency) }
        }
        measured.sort()
        print("reactor wake latency over \(measured.count) writes: median \(measured[measured.count / 2]), "
            + "99th percentile \(measured[measured.count * 99 / 100]), worst \(measured.last!)")
        #expect(measured.count == 200)
        // Generous for a loaded two-core builder; typically tens of microseconds.
        #expect(measured[measured.count / 2] < .milliseconds(100))
    }
}

extension Reactor {
    /// Runs `handler` on the reactor thread at `deadline`; from any thread.
    fileprivate func schedule(at deadline: ContinuousClock.Instant, _ handler: @escaping @Sendable () -> Void) {
        enqueue { [self] in addTimer(at: deadline, handler: handler) }
    }
}
