import BlueZ
import DaemonSupport
import Foundation
import Machines
import Storage
import Synchronization
import Transfer
import Trust

/// The receiving role: Apple's central flow over BlueZ. Waits for `poweredOn`, scans for the transfer service,
/// connects, subscribes, reassembles, verifies, acknowledges (framed), unsubscribes, disconnects — CoreBluetooth
/// sample's `cleanup()` order — and scans again for the next message. Leaving `poweredOn` abandons the current
/// transfer (nothing of it is kept) and work resumes when the state comes back.
package final class Central: Sendable {
    package let configuration: CentralConfiguration
    package let session: BluetoothSession
    /// Everything the run does, in order. Finishes when `run` returns.
    package let events: AsyncStream<RoleEvent>
    let continuation: AsyncStream<RoleEvent>.Continuation
    let progressState: RunState

    package init(configuration: CentralConfiguration, session: BluetoothSession) {
        self.configuration = configuration
        self.session = session
        (events, continuation) = AsyncStream<RoleEvent>.makeStream(bufferingPolicy: .unbounded)
        progressState = RunState(book: PeerBook(backoff: configuration.backoff, minimumRSSI: configuration.minimumRSSI))
    }

    /// Receives `configuration.messageCount` messages (forever when nil) and hands each to `sink`. Returns the number
    /// received. Throws a ``ClassifiedFailure`` for what ends the run (unknown adapter, no bluetoothd at start, a
    /// corrupt message, a sink that cannot write, the deadline), `CancellationError` when cancelled. A stop
    /// (``GracefulStop``) ends the run between two inputs, after the link is released and discovery stopped: it
    /// returns the number received so far.
    ///
    /// - Parameter timeout: overall deadline; passing it ends the run with `.timedOut`.
    @discardableResult
    package func run(sink: any MessageSink, timeout: Duration? = nil) async throws -> Int {
        defer { continuation.finish() }
        guard let timeout else { return try await runUntilDone(sink: sink) }
        let state = progressState
        let wanted = configuration.messageCount
        do {
            return try await withTimeLimit(timeout, onTimeout: {
                let seconds = MessageAssembly.describe(timeout)
                if let wanted, wanted > 1 {
                    return RoleFailure(.timedOut, "timed out after \(seconds) (\(state.receivedSnapshot) of \(wanted) messages received)")
                }
                if wanted == nil, state.receivedSnapshot > 0 {
                    return RoleFailure(.timedOut, "timed out after \(seconds) with \(state.receivedSnapshot) message(s) received, "
                        + "before the sender ended its session; run again to take the rest")
                }
                return RoleFailure(.timedOut, "timed out after \(seconds) without receiving a message")
            }) {
                try await self.runUntilDone(sink: sink)
            }
        } catch let failure as RoleFailure where failure.kind == .timedOut {
            // Every wanted message was stored (and acknowledged) before the deadline; only the
            // clean-up after the last one was still running: the run did its job.
            if let wanted, state.receivedSnapshot >= wanted { return state.receivedSnapshot }
            throw failure
        }
    }

    // MARK: State-driven supervision

    private enum WorkOutcome: Sendable {
        case finished
        case failed(any ClassifiedFailure)
        /// Cancelled (the adapter left `poweredOn`) or stopped (``GracefulStop``).
        case interrupted
    }

    private func runUntilDone(sink: any MessageSink) async throws -> Int {
        let driver = ManagerStateDriver(session: session, adapterName: configuration.adapterName, requirement: .central)
        if let failure = driver.unknownAdapterFailure() { throw failure }
        let supervisor = ManagerStateSupervisor<WorkOutcome>(driver: driver)
        return try await supervisor.run(
            transitionSeen: { transition, history in
                emit(transition.roleEvent)
                guard history.isFirstTransition else { return }
                if let failure = transition.startupFailure { throw failure }
                let queue = configuration.notificationQueue
                if !queue.isSufficient { emit(.warning("notification queue: \(queue.summary)")) }
                if transition.to == .poweredOff {
                    emit(.warning("waiting for the adapter to be powered on (e.g. bluetoothctl power on)"))
                }
            },
            // Leaving poweredOn cancels the work: that abandons the transfer in progress
            // (nothing partial reaches the sink), releases the link and stops discovery.
            periodWork: { adapter in await self.work(on: adapter, sink: sink) },
            periodEnded: { outcome in
                switch outcome {
                case .finished: return progressState.receivedSnapshot
                case .failed(let failure): throw failure
                case .interrupted: return nil
                }
            },
            stopped: { progressState.receivedSnapshot })
    }

    // MARK: Work in poweredOn

    private func work(on adapter: Adapter, sink: any MessageSink) async -> WorkOutcome {
        var scanFailures = 0
        while !Task.isCancelled && !GracefulStop.isRequested {
            if let wanted = configuration.messageCount, progressState.receivedSnapshot >= wanted { return .finished }
            let found: (Device, PeerDescription)
            do {
                found = try await discoverPeer(on: adapter)
                scanFailures = 0
            } catch {
                await stopDiscovery(adapter)
                if error is CancellationError || error is StopRequested { return .interrupted }
                if let failure = error as? any ClassifiedFailure { return .failed(failure) }
                if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
                scanFailures += 1
                let delay = configuration.backoff.delay(afterFailures: scanFailures)
                emit(.retrying(reason: "scanning failed: \(Self.describe(error))", delay: delay))
                guard await GracefulStop.sleep(for: delay) else { return .interrupted }
                continue
            }
            let (device, peer) = found
            let receivedBeforeVisit = progressState.receivedSnapshot
            do {
                try await visit(device, peer: peer, adapter: adapter, sink: sink)
                let now = progressState.elapsed
                progressState.withBook { $0.recordSuccess(peer.address, at: now) }
                if configuration.messageCount == nil, configuration.endsWithSendersSession,
                   progressState.receivedSnapshot > receivedBeforeVisit {
                    return .finished
                }
            } catch {
                let storedSome = progressState.receivedSnapshot > receivedBeforeVisit
                if let outcome = afterFailedVisit(error, peer: peer, storedSome: storedSome) { return outcome }
            }
        }
        return .interrupted
    }

    /// Books a visit that ended in `error` (`storedSome`: it stored messages first) and says
    /// how the run goes on: nil to scan again, or the outcome that ends `work`.
    private func afterFailedVisit(_ error: any Error, peer: PeerDescription, storedSome: Bool) -> WorkOutcome? {
        if error is CancellationError || error is StopRequested { return .interrupted }
        switch error {
        case let failure as TransferFailure:
            if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
            // One send's session: a sender that has given its last message may close the link rather than the
            // session. Whatever ended a visit that stored messages, the run has what that send offered; a sender that
            // still holds files keeps them for the next `receive` (nothing is acknowledged that was not stored).
            if configuration.messageCount == nil, configuration.endsWithSendersSession, storedSome { return .finished }
            let severe: Bool = switch failure {
            case .unsuitable, .refused: true
            default: false
            }
            let delay = backOff(peer, severe: severe, storedSome: storedSome)
            if case .refused(let bound, let reason) = failure {
                emit(.refused(peer, bound: bound, reason: reason, delay: delay))
                return nil
            }
            if case .corrupt(let error) = failure, configuration.stopOnCorruptMessage {
                return .failed(RoleFailure(.dataError, "message from \(EventText.describe(peer)) failed verification: \(error)"))
            }
            emit(.retrying(reason: "\(EventText.describe(peer)): \(failure)", delay: delay))
            return nil
        case let failure as any ClassifiedFailure: return .failed(failure)
        default:
            if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
            let delay = backOff(peer, severe: false, storedSome: storedSome)
            emit(.retrying(reason: "\(EventText.describe(peer)): \(Self.describe(error))", delay: delay))
            return nil
        }
    }

    /// How long `peer` waits after a failed visit. A visit that stored messages before the link failed (a multi session
    /// cut midway) proved the sender: unless the failure is severe, it is visited again at once, not backed off.
    private func backOff(_ peer: PeerDescription, severe: Bool, storedSome: Bool) -> Duration {
        let now = progressState.elapsed
        return progressState.withBook { book in
            if storedSome && !severe {
                book.recordSuccess(peer.address, at: now)
                return .zero
            }
            return book.recordFailure(peer.address, at: now, severe: severe)
        }
    }

    // MARK: Helpers

    func emit(_ event: RoleEvent) { continuation.yield(event) }

    /// Failures no retry of this peer fixes end the work (the state machine takes over when Bluetooth went away).
    static func rethrowIfFatal(_ error: BluetoothError) throws {
        switch error {
        case .accessDenied: throw RoleFailure(.permissionDenied, error.description)
        case .systemBusUnavailable, .bluetoothdNotRunning: throw error
        default: return
        }
    }

    /// HELLO and ACK go as write requests when the characteristic takes them: the reply means the peripheral has the
    /// value (HELLO before we subscribe, ACK before we disconnect). Apple's offers write-without-response only.
    static func writeType(for flags: [GATTCharacteristicFlag]) -> GATTWriteType? {
        if flags.contains(.write) { return .request }
        if flags.contains(.writeWithoutResponse) { return .command }
        return nil
    }

    static func describe(_ error: any Error) -> String {
        (error as? any ClassifiedFailure)?.userMessage ?? "\(error)"
    }
}
