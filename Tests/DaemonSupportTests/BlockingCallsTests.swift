import Foundation
import Synchronization
import SystemCalls
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The threads that take blocking calls (`fsync`, a `poll` without a timeout) off the
/// cooperative pool.
@Suite struct BlockingCallsTests {
    /// The name of the thread this runs on, as Linux keeps it.
    static func threadName() -> String {
        let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? ""
        return name.trimmingCharacters(in: .newlines)
    }

    /// Something a blocking call throws.
    struct CallFailure: Error, Equatable {
        var call: String
        var errno: Int32
    }

    /// What the calls of a test did, seen from the test.
    final class CallProgress: Sendable {
        let started = Atomic<Bool>(false)
        let finished = Atomic<Int>(0)
    }

    final class Order: Sendable {
        let names = Mutex<[String]>([])
    }

    @Test func aCallReturnsItsValue() async {
        #expect(await BlockingCalls.run { 6 * 7 } == 42)
        #expect(await BlockingCalls.waits.run { "waited" } == "waited")
    }

    @Test func aCallThrowsItsOwnError() async {
        do throws(CallFailure) {
            _ = try await BlockingCalls.run { () throws(CallFailure) -> Int in throw CallFailure(call: "fsync", errno: EIO) }
            Issue.record("no error")
        } catch {
            #expect(error == CallFailure(call: "fsync", errno: EIO))
        }
    }

    @Test func aCallRunsOnAThreadOfThePoolNotTheCaller() async {
        let pool = BlockingThreadPool(name: "ble-test-own", threadCount: 1)
        let caller = Self.threadName()
        let (name, thread) = await pool.run { (Self.threadName(), UInt(bitPattern: Int(bitPattern: pthread_self()))) }
        #expect(name == "ble-test-own")
        #expect(caller != "ble-test-own")
        // One thread: every call runs on it.
        let again = await pool.run { UInt(bitPattern: Int(bitPattern: pthread_self())) }
        #expect(again == thread)
        #expect(await BlockingCalls.run { Self.threadName() } == BlockingCalls.storage.name)
    }

    @Test func manyConcurrentCallsAllCompleteOnTheFixedThreads() async {
        let pool = BlockingThreadPool(name: "ble-test-many", threadCount: 2)
        let results = await withTaskGroup(of: (Int, UInt).self) { group in
            for value in 0..<500 {
                group.addTask {
                    await pool.run {
                        usleep(50)   // a short blocking call
                        return (value, UInt(bitPattern: Int(bitPattern: pthread_self())))
                    }
                }
            }
            var all: [(Int, UInt)] = []
            for await result in group { all.append(result) }
            return all
        }
        #expect(results.map(\.0).sorted() == Array(0..<500))
        #expect(Set(results.map(\.1)).count <= 2)
    }

    @Test func aCancelledCallerStillGetsTheOutcomeOfItsCall() async throws {
        let pool = BlockingThreadPool(name: "ble-test-cancel", threadCount: 1)
        let release = DispatchSemaphore(value: 0)
        let progress = CallProgress()
        // Started before the cancellation: an fsync in flight.
        let inFlight = Task {
            await pool.run {
                progress.started.store(true, ordering: .sequentiallyConsistent)
                release.wait()
                progress.finished.add(1, ordering: .sequentiallyConsistent)
                return "flushed"
            }
        }
        while !progress.started.load(ordering: .sequentiallyConsistent) { try await Task.sleep(for: .milliseconds(5)) }
        // Queued behind it when cancelled: made all the same, as its caller could not tell
        // "skipped" from "done".
        let queued = Task { try await pool.run { () throws(CallFailure) -> String in
            progress.finished.add(1, ordering: .sequentiallyConsistent)
            throw CallFailure(call: "fdatasync", errno: EIO)
        } }
        try await Task.sleep(for: .milliseconds(20))
        inFlight.cancel()
        queued.cancel()
        try await Task.sleep(for: .milliseconds(20))
        #expect(progress.finished.load(ordering: .sequentiallyConsistent) == 0, "still waiting for the call in flight")
        release.signal()
        #expect(await inFlight.value == "flushed")
        await #expect(throws: CallFailure(call: "fdatasync", errno: EIO)) { try await queued.value }
        #expect(progress.finished.load(ordering: .sequentiallyConsistent) == 2)
    }

    @Test func aSubmittedCallRunsAfterThoseQueuedBeforeIt() async throws {
        let pool = BlockingThreadPool(name: "ble-test-submit", threadCount: 1)
        let order = Order()
        let release = DispatchSemaphore(value: 0)
        let first = Task { await pool.run { release.wait(); order.names.withLock { $0.append("awaited") } } }
        try await Task.sleep(for: .milliseconds(20))
        let done = DispatchSemaphore(value: 0)
        pool.submit {
            order.names.withLock { $0.append("submitted") }
            done.signal()
        }
        release.signal()
        await first.value
        // The submitted call ran after, on the same thread: waiting for it here cannot stall.
        await BlockingCalls.waits.run { done.wait() }
        #expect(order.names.withLock { $0 } == ["awaited", "submitted"])
    }
}
