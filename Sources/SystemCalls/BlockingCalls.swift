#if canImport(Glibc)
import Dispatch
import Glibc
import Synchronization
import SystemPackage

/// Calls that block a thread (`fsync`, `fdatasync`, a `poll` without a timeout, large file writes) made from async code
/// without blocking the cooperative pool. That pool has one thread per core (two on the small boards this runs on): a
/// flush taking a slow disk a second would hold one for that second, and every task, Bluetooth I/O included, would
/// share what is left. `try await BlockingCalls.run { … }` runs the closure on ``storage``'s threads.
package enum BlockingCalls {
    /// File system calls (write, flush, rename, link): two threads, so one slow call (a flush to a USB stick holding the
    /// output directory) does not hold up calls to another device (the receipt journal and outbox in the state
    /// directory); not more, as they would only queue more calls at the same disks. One task's calls are made in the
    /// order it awaits them.
    package static let storage = BlockingThreadPool(name: "ble-storage", threadCount: 2)

    /// Waits without a bound (standard output's reader may stop reading for good): a thread of their own, so such a
    /// wait never holds up a file system call.
    package static let waits = BlockingThreadPool(name: "ble-wait", threadCount: 1)

    package static func run<Value: Sendable, Failure: Error>(
        _ body: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        try await storage.run(body)
    }
}

/// A fixed number of threads of its own that run blocking closures for async callers, first come first served.
///
/// Cancellation: a call is made whatever happens to the awaiting task, which waits for its outcome. A started `fsync`
/// cannot be interrupted, and a caller keeping a message exactly once must know whether its flush or rename happened;
/// one not started is not skipped either, as the caller could not tell "skipped" from "done". A task that should stop
/// checks for cancellation once the call returned.
package final class BlockingThreadPool: Sendable {
    /// The threads' name (`ps -T`, `top -H`, a debugger): at most 15 bytes, as Linux keeps.
    package let name: String
    package let threadCount: Int
    private let queue: JobQueue

    /// Starts `threadCount` threads named `name`. A process that cannot start a thread cannot store anything safely:
    /// failing to is fatal, with the call's errno.
    package init(name: String, threadCount: Int) {
        precondition(threadCount > 0, "a pool needs a thread")
        precondition(name.utf8.count <= 15, "Linux keeps 15 bytes of a thread's name")
        self.name = name
        self.threadCount = threadCount
        queue = JobQueue()
        for _ in 0..<threadCount {
            Self.startThread(ThreadStart(name: name, queue: queue))
        }
    }

    deinit {
        // The threads end once the calls queued before this are done.
        for _ in 0..<threadCount { queue.push(.stop) }
    }

    /// Runs `body` on one of this pool's threads, awaited even when the task is cancelled (see the type).
    package func run<Value: Sendable, Failure: Error>(
        _ body: @escaping @Sendable () throws(Failure) -> Value
    ) async throws(Failure) -> Value {
        let outcome: Result<Value, Failure> = await withCheckedContinuation { continuation in
            queue.push(.call {
                continuation.resume(returning: Result { () throws(Failure) -> Value in try body() })
            })
        }
        return try outcome.get()
    }

    /// Queues `body` on this pool's threads without waiting for it: for work whose outcome no one needs (a best-effort
    /// flush) from code that cannot await where it stands. Calls queued before it are taken first.
    package func submit(_ body: @escaping @Sendable () -> Void) { queue.push(.call(body)) }

    private static func startThread(_ start: ThreadStart) {
        var thread = pthread_t()
        let box = Unmanaged.passRetained(start).toOpaque()
        let result = pthread_create(&thread, nil, { argument in
            let start = Unmanaged<ThreadStart>.fromOpaque(argument!).takeRetainedValue()
            _ = setThreadName?(pthread_self(), start.name)
            start.queue.serve()
            return nil
        }, box)
        guard result == 0 else {
            Unmanaged<ThreadStart>.fromOpaque(box).release()
            fatalError("pthread_create failed: \(Errno(rawValue: result))")
        }
        pthread_detach(thread)
    }
}

/// `pthread_setname_np`, which the Glibc module does not export (a GNU extension), looked up once at run time; without
/// it the threads keep the process's name.
private let setThreadName: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32)? = {
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "pthread_setname_np") else { return nil }
    return unsafeBitCast(symbol, to: (@convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32).self)
}()

private final class ThreadStart: Sendable {
    let name: String
    let queue: JobQueue

    init(name: String, queue: JobQueue) {
        self.name = name
        self.queue = queue
    }
}

/// The calls waiting for a thread, in order, and a count of them the threads sleep on.
private final class JobQueue: Sendable {
    enum Job: Sendable {
        case call(@Sendable () -> Void)
        /// One thread ends (the pool is gone).
        case stop
    }

    private let jobs = Mutex<[Job]>([])
    /// Counts the jobs queued, not yet taken: a thread sleeps in `wait` while there are none.
    private let queued = DispatchSemaphore(value: 0)

    func push(_ job: Job) {
        jobs.withLock { $0.append(job) }
        queued.signal()
    }

    func serve() {
        while true {
            queued.wait()
            let job = jobs.withLock { $0.removeFirst() }
            switch job {
            case .call(let call): call()
            case .stop: return
            }
        }
    }
}
#endif
