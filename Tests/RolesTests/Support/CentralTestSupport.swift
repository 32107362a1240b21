import BlueZ
@testable import Machines
@testable import Storage
import Synchronization
import Foundation
@testable import Roles
import Testing
import TestSupport
import Transfer

/// A sink that keeps messages in memory.
final class CollectingSink: MessageSink, @unchecked Sendable {
    // @unchecked Sendable: `stored` is only touched while holding `lock`.
    private let lock = NSLock()
    private var stored: [ReceivedMessage] = []
    let failure: SinkFailure?

    init(failing failure: SinkFailure? = nil) {
        self.failure = failure
    }

    var messages: [ReceivedMessage] {
        lock.lock()
        defer { lock.unlock() }
        return stored
    }

    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        if let failure { throw failure }
        lock.withLock { stored.append(message) }
        return nil
    }
}

/// A directory sink whose first store fails as a full disk does (``MessageRefused``), then
/// stores.
final class RefusingOnceSink: MessageSink {
    private let state = Mutex((refusals: 0, stored: [ReceivedMessage]()))

    var refusals: Int { state.withLock { $0.refusals } }
    var messages: [ReceivedMessage] { state.withLock { $0.stored } }

    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let refuse = state.withLock { state in
            if state.refusals == 0 {
                state.refusals += 1
                return true
            }
            state.stored.append(message)
            return false
        }
        if refuse { throw MessageRefused(reason: "disk full") }
        return nil
    }
}

/// Collects a role's events while it runs; a test can wait for a particular one.
final class EventRecorder: @unchecked Sendable {
    // @unchecked Sendable: `recorded` and `waiters` are only touched while holding `lock`.
    private let lock = NSLock()
    private var recorded: [RoleEvent] = []
    private var waiters: [(matches: @Sendable (RoleEvent) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    private var finished = false
    private var task: Task<Void, Never>?
    /// BLETRANSFER_TEST_TRACE=1 prints every event while a test runs.
    static let trace = ProcessInfo.processInfo.environment["BLETRANSFER_TEST_TRACE"] != nil

    init(_ events: AsyncStream<RoleEvent>) {
        task = Task { [weak self] in
            for await event in events {
                self?.append(event)
            }
            self?.finish()
        }
    }

    private func append(_ event: RoleEvent) {
        if Self.trace { FileHandle.standardError.write(Data("event: \(event)\n".utf8)) }
        let ready = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            recorded.append(event)
            let (done, waiting) = waiters.reduce(into: ([CheckedContinuation<Void, Never>](), [(matches: @Sendable (RoleEvent) -> Bool, continuation: CheckedContinuation<Void, Never>)]())) { result, waiter in
                if waiter.matches(event) { result.0.append(waiter.continuation) } else { result.1.append(waiter) }
            }
            waiters = waiting
            return done
        }
        for continuation in ready { continuation.resume() }
    }

    private func finish() {
        let pending = lock.withLock { () -> [CheckedContinuation<Void, Never>] in
            finished = true
            defer { waiters = [] }
            return waiters.map(\.continuation)
        }
        for continuation in pending { continuation.resume() }
    }

    /// Returns once an event matching `predicate` was recorded (or the stream ended; the
    /// caller's next expectation then fails).
    func waitFor(_ predicate: @escaping @Sendable (RoleEvent) -> Bool) async {
        await withCheckedContinuation { continuation in
            let done = lock.withLock { () -> Bool in
                if finished || recorded.contains(where: predicate) { return true }
                waiters.append((predicate, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Every event, once the stream finished (the role's run returned).
    func all() async -> [RoleEvent] {
        await task?.value
        return lock.withLock { recorded }
    }
}

extension RoleEvent {
    var isReceived: Bool { if case .received = self { true } else { false } }
    var isAborted: Bool { if case .transferAborted = self { true } else { false } }
    var isRetrying: Bool { if case .retrying = self { true } else { false } }
    var subscribedFormat: TransferFormat? { if case .subscribed(_, _, let format, _) = self { format } else { nil } }
    var receivedSummary: MessageSummary? { if case .received(let summary, _, _) = self { summary } else { nil } }
    var isScanning: Bool { if case .scanning = self { true } else { false } }
    var isProgress: Bool { if case .progress = self { true } else { false } }
    var stateReached: ManagerState? { if case .stateChanged(_, let to, _) = self { to } else { nil } }
}

enum CentralTestData {
    /// Deterministic bytes that are not text.
    static func binary(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
        var state = UInt32(seed) &* 2_654_435_761 | 1
        return (0..<count).map { _ in
            state ^= state << 13
            state ^= state >> 17
            state ^= state << 5
            return UInt8(truncatingIfNeeded: state)
        }
    }

    /// Text with multi-byte characters, so that a character straddles two 20-byte values.
    static let text = Array("Grüße aus dem Labor — ✓ every byte counts: 𝄞 naïve café ".utf8)

    static func configuration(count: Int? = 1, adapter: String = "hci0", idle: Duration = .seconds(5),
                              framed: Bool = true) -> CentralConfiguration {
        var configuration = CentralConfiguration(
            adapterName: adapter, messageCount: count, requestFramed: framed, idleTimeout: idle,
            connectTimeout: .seconds(10), servicesResolveTimeout: .seconds(10),
            backoff: BackoffPolicy(initial: .milliseconds(100), maximum: .seconds(1)))
        // GATT only, whatever the host's kernel offers: a real L2CAP socket would aim at
        // BlueZoo's invented addresses (ChannelBlueZooTests use LoopbackChannels).
        configuration.channelTransport = nil
        return configuration
    }
}

extension Trait where Self == ConditionTrait {
    /// Runs a suite or test only where BlueZoo can run (dbus-daemon and bluezoo installed).
    static var needsBlueZoo: Self {
        .enabled(if: BlueZooBus.isAvailable, "needs dbus-daemon and bluezoo (pip install bluezoo)")
    }
}
