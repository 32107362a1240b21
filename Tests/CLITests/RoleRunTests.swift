@testable import bletransfer
import ServiceLifecycle
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `RoleRun.run`: how a role's run ends, and that its events — down to those of its teardown
/// after a deadline or a signal — are all rendered, in order, before the outcome is returned.
/// Serialized: the signal case traps SIGTERM for the whole process, and a run beside it would
/// see the signal too.
@Suite(.serialized, .timeLimit(.minutes(1))) struct RoleRunTests {
    struct Refused: Error {}

    /// A role's event stream as the roles have one: finished when the role's run returns.
    final class Events: Sendable {
        let stream: AsyncStream<String>
        let input: AsyncStream<String>.Continuation
        let rendered = Mutex<[String]>([])

        init() {
            (stream, input) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        }

        func render() async {
            for await event in stream { rendered.withLock { $0.append(event) } }
            rendered.withLock { $0.append("finished") }
        }

        /// A role that reports `"started"`, then waits until it is cancelled and reports its
        /// teardown; `afterStart` runs once `"started"` is reported.
        func roleWaitingForCancellation(afterStart: @escaping @Sendable () -> Void = {}) -> @Sendable () async throws -> Void {
            { [input] in
                defer { input.finish() }
                input.yield("started")
                afterStart()
                do {
                    try await Task.sleep(for: .seconds(3600))
                } catch {
                    input.yield("teardown")
                    throw error
                }
            }
        }

        /// A role that reports `"started"`, then waits until it is asked to stop (the group's
        /// graceful shutdown) and reports its teardown, naming whether its task was cancelled.
        func roleWaitingForStop(afterStart: @escaping @Sendable () -> Void = {}) -> @Sendable () async throws -> Void {
            { [input] in
                defer { input.finish() }
                input.yield("started")
                afterStart()
                try await gracefulShutdown()
                input.yield(Task.isCancelled ? "teardown, cancelled" : "teardown")
            }
        }
    }

    @Test func aRoleThatReturnsFinishesTheRunWithEveryEventRendered() async {
        let events = Events()
        let outcome = await RoleRun.run(timeout: .seconds(3600), rendering: events.render) { [input = events.input] in
            defer { input.finish() }
            for index in 0..<500 { input.yield("event \(index)") }
        }
        guard case .finished = outcome else {
            Issue.record("outcome \(outcome)")
            return
        }
        #expect(events.rendered.withLock { $0 } == (0..<500).map { "event \($0)" } + ["finished"])
    }

    @Test func aRoleThatThrowsFailsTheRun() async {
        let events = Events()
        let outcome = await RoleRun.run(timeout: nil, rendering: events.render) { [input = events.input] in
            defer { input.finish() }
            input.yield("refusing")
            throw Refused()
        }
        guard case .failed(let error) = outcome else {
            Issue.record("outcome \(outcome)")
            return
        }
        #expect(error is Refused)
        #expect(events.rendered.withLock { $0 } == ["refusing", "finished"])
    }

    /// The role for each way a stop reaches it: one that watches the graceful shutdown (and
    /// must not be cancelled), one that only cancellation ends.
    static func role(stopped stopping: RoleRun.Stopping, _ events: Events,
                     afterStart: @escaping @Sendable () -> Void = {}) -> @Sendable () async throws -> Void {
        switch stopping {
        case .gracefully: events.roleWaitingForStop(afterStart: afterStart)
        case .byCancellation: events.roleWaitingForCancellation(afterStart: afterStart)
        }
    }

    @Test(arguments: [RoleRun.Stopping.gracefully, .byCancellation])
    func theDeadlineStopsTheRoleAndWaitsForItsTeardown(stopping: RoleRun.Stopping) async {
        let events = Events()
        let outcome = await RoleRun.run(timeout: .milliseconds(20), stopping: stopping, rendering: events.render,
                                        Self.role(stopped: stopping, events))
        guard case .timedOut(let seconds) = outcome else {
            Issue.record("outcome \(outcome)")
            return
        }
        #expect(seconds == 0.02)
        // "teardown", not "teardown, cancelled": a role that watches the stop is never cancelled.
        #expect(events.rendered.withLock { $0 } == ["started", "teardown", "finished"])
    }

    /// Sent once the role runs: `run` has trapped the signal by then (the default action would
    /// end the test process).
    @Test(arguments: [(RoleRun.Stopping.gracefully, SIGINT), (.byCancellation, SIGTERM)])
    func aSignalStopsTheRoleAndNamesItself(stopping: RoleRun.Stopping, signal: Int32) async {
        let events = Events()
        let outcome = await RoleRun.run(timeout: nil, stopping: stopping, rendering: events.render,
                                        Self.role(stopped: stopping, events) { _ = kill(getpid(), signal) })
        guard case .interrupted(let received) = outcome else {
            Issue.record("outcome \(outcome)")
            return
        }
        #expect(received == signal)
        #expect(events.rendered.withLock { $0 } == ["started", "teardown", "finished"])
    }

    @Test func aRunWithoutARendererEndsAsTheRoleDoes() async {
        let outcome = await RoleRun.run(timeout: nil) {}
        guard case .finished = outcome else {
            Issue.record("outcome \(outcome)")
            return
        }
    }
}
