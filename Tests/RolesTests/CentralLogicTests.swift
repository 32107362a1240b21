import BlueZ
import DaemonSupport
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
@testable import Transfer
import Trust
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// The central's decisions without a bus: back-off, which peers to visit, how notification
/// values, silence and hang-ups become a message or a failure, how BlueZ adapter events become
/// manager states.
@Suite struct CentralLogicTests {
    // MARK: Back-off

    @Test func aMissingEndIsTransientAndAStreamAfterItsEndIsNot() {
        // The sender left before its end: try again, do not end the run.
        #expect(TransferFailure(ReceiveError.missingEndOfMessage(received: 4))
                == .transient(ReceiveError.missingEndOfMessage(received: 4).description))
        #expect(TransferFailure(ReceiveError.valueAfterEndOfMessage) == .corrupt(.valueAfterEndOfMessage))
    }

    @Test func backoffDoublesUpToItsCap() {
        let policy = BackoffPolicy(initial: .milliseconds(500), maximum: .seconds(3))
        #expect(policy.delay(afterFailures: 0) == .zero)
        #expect(policy.delay(afterFailures: 1) == .milliseconds(500))
        #expect(policy.delay(afterFailures: 2) == .seconds(1))
        #expect(policy.delay(afterFailures: 3) == .seconds(2))
        #expect(policy.delay(afterFailures: 4) == .seconds(3))
        #expect(policy.delay(afterFailures: 1000) == .seconds(3))
    }

    // MARK: Peer book

    @Test func rssiFloorRefusesWeakAndUnmeasuredPeers() {
        let book = PeerBook(backoff: BackoffPolicy(), minimumRSSI: -70)
        #expect(book.accepts(address: "AA:BB:CC:DD:EE:FF", rssi: -60, at: .zero))
        #expect(book.accepts(address: "AA:BB:CC:DD:EE:FF", rssi: -70, at: .zero))
        #expect(!book.accepts(address: "AA:BB:CC:DD:EE:FF", rssi: -71, at: .zero))
        // A device BlueZ only remembers has no RSSI: it must advertise again first.
        #expect(!book.accepts(address: "AA:BB:CC:DD:EE:FF", rssi: nil, at: .zero))
        let noFloor = PeerBook(backoff: BackoffPolicy(), minimumRSSI: nil)
        #expect(noFloor.accepts(address: "AA:BB:CC:DD:EE:FF", rssi: nil, at: .zero))
    }

    @Test func failingPeerWaitsLongerEachTimeAndSuccessForgives() {
        var book = PeerBook(backoff: BackoffPolicy(initial: .seconds(1), maximum: .seconds(30)), minimumRSSI: nil)
        let peer = "aa:bb:cc:dd:ee:ff"
        #expect(book.recordFailure(peer, at: .seconds(10)) == .seconds(1))
        #expect(!book.isEligible("AA:BB:CC:DD:EE:FF", at: .milliseconds(10_500)))
        #expect(book.isEligible("AA:BB:CC:DD:EE:FF", at: .seconds(11)))
        #expect(book.recordFailure(peer, at: .seconds(11)) == .seconds(2))
        #expect(book.nextEligibility(after: .seconds(11)) == .seconds(13))
        // Another peer is not held back by this one.
        #expect(book.isEligible("11:22:33:44:55:66", at: .seconds(11)))
        book.recordSuccess(peer)
        #expect(book.isEligible(peer, at: .seconds(11)))
        #expect(book.recordFailure(peer, at: .seconds(12)) == .seconds(1))
    }

    @Test func unsuitablePeerWaitsMuchLonger() {
        var book = PeerBook(backoff: BackoffPolicy(initial: .seconds(1), maximum: .seconds(60)), minimumRSSI: nil)
        #expect(book.recordFailure("AA:BB:CC:DD:EE:FF", at: .zero, severe: true) == .seconds(8))
    }

    // MARK: Message assembly

    static func compatValues(_ payload: [UInt8], chunk: Int = 20) -> [[UInt8]] {
        var sender = MessageSender(message: OutgoingMessage(payload: payload), maximumValueLength: chunk)
        var values: [[UInt8]] = []
        while let value = sender.nextValue() { values.append(value) }
        return values
    }

    @Test func compatValuesBecomeOneMessageAtEOM() {
        let payload = Array("Grüße ✓ — a message longer than one twenty-byte value".utf8)
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(5))
        var steps: [MessageAssembly.Step] = []
        for (index, value) in Self.compatValues(payload).enumerated() {
            steps.append(assembly.handle(.value(value), at: .milliseconds(100 + index * 10)))
        }
        guard case .formatDetected(.compat, _) = steps.first else {
            Issue.record("first step should tell the format, got \(String(describing: steps.first))")
            return
        }
        guard case .complete(let message, let duration) = steps.last else {
            Issue.record("last step should complete, got \(String(describing: steps.last))")
            return
        }
        #expect(message.payload == payload)
        #expect(message.text == String(decoding: payload, as: UTF8.self))
        #expect(duration == .milliseconds((steps.count - 1) * 10))
        // Nothing after the end counts.
        #expect(assembly.handle(.value([1, 2, 3]), at: .seconds(1)) == .proceed(progress: nil))
    }

    /// Version-1 framed values, as a retired bletransfer sender would answer a HELLO: sequence
    /// number 0 with the header's magic and version, the payload behind sequence numbers, `EOM`.
    static func version1Values(_ payload: [UInt8]) -> [[UInt8]] {
        let first: [UInt8] = [0, 0, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1] + [UInt8](repeating: 0, count: 9)
        let pieces = stride(from: 0, to: payload.count, by: 18).enumerated().map { index, start in
            [0, UInt8(index + 1)] + Array(payload[start..<min(start + 18, payload.count)])
        }
        return [first] + pieces + [WireFormat.endOfMessage]
    }

    /// The session a central makes when it writes its HELLO: the assembly then waits for the
    /// first values to tell the secure stream from Apple's flow.
    static func sessionAfterHello() -> SecureReceiverSession {
        SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: HelloV2(session: 1, offered: [.secure]),
                              maximumPayloadLength: 1 << 20, maximumWriteLength: 20)
    }

    @Test func aVersion1AnswerIsRefusedAtItsFirstValueWithOneLine() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(5), secure: Self.sessionAfterHello())
        let values = Self.version1Values(CentralTestData.binary(500))
        let first = assembly.handle(.value(values[0]), at: .seconds(1))
        #expect(first == .failed(MessageAssembly.version1Refusal))
        guard case .failed(.refused(let bound, let reason)) = first else { return }
        #expect(bound == "framed-version")
        #expect(reason.contains("framed version 1") && reason.contains("update bletransfer"))
        // Nothing after the refusal counts: no message is ever completed from it.
        for value in values.dropFirst() {
            #expect(assembly.handle(.value(value), at: .seconds(2)) == .proceed(progress: nil))
        }
    }

    @Test func aVersion1AnswerOvertakenByItsEOMIsRefusedToo() {
        let sent = Self.version1Values([])
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15), undecidedSettle: .seconds(1),
                                       secure: Self.sessionAfterHello())
        #expect(assembly.handle(.value(sent.last!), at: .zero) == .proceed(progress: nil))
        #expect(assembly.handle(.value(sent[0]), at: .milliseconds(10)) == .failed(MessageAssembly.version1Refusal))
    }

    @Test func compatStreamOverTheLimitIsRefused() {
        var assembly = MessageAssembly(limits: TransferLimits(maximumMessageSize: 50), idleTimeout: .seconds(5))
        var last: MessageAssembly.Step?
        for value in Self.compatValues(CentralTestData.binary(100)) {
            last = assembly.handle(.value(value), at: .seconds(1))
            if case .failed = last { break }
        }
        guard case .failed(.corrupt(.compatMessageTooLarge)) = last else {
            Issue.record("expected the size limit, got \(String(describing: last))")
            return
        }
    }

    @Test func silenceLongerThanTheIdleTimeoutAbandonsTheTransfer() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(2))
        #expect(assembly.handle(.tick, at: .seconds(1)) == .proceed(progress: nil))
        _ = assembly.handle(.value(Array("partial".utf8)), at: .milliseconds(1500))
        #expect(assembly.handle(.tick, at: .seconds(3)) == .proceed(progress: nil))
        guard case .failed(.transient(let reason)) = assembly.handle(.tick, at: .milliseconds(3600)) else {
            Issue.record("expected the idle timeout")
            return
        }
        #expect(reason.contains("stalled"))
        #expect(reason.contains("7 bytes"))
    }

    @Test func hangUpBeforeEOMKeepsNothing() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(2))
        _ = assembly.handle(.value(Array("half a message".utf8)), at: .zero)
        guard case .failed(.transient(let reason)) = assembly.handle(.ended("the peripheral disconnected"), at: .seconds(1)) else {
            Issue.record("expected a transient failure")
            return
        }
        #expect(reason.contains("the peripheral disconnected"))
        #expect(reason.contains("14 bytes"))
    }

    @Test func loneEOMAfterOurHelloSettlesAsAnEmptyCompatMessageAfterThePause() {
        // A peer that ignored the HELLO (Apple's sample) sending an empty message: only `EOM`.
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15), undecidedSettle: .seconds(1),
                                       secure: Self.sessionAfterHello())
        #expect(assembly.handle(.value(WireFormat.endOfMessage), at: .seconds(2)) == .proceed(progress: nil))
        // Within the pause a secure stream's first value could still arrive: keep waiting.
        #expect(assembly.handle(.tick, at: .milliseconds(2500)) == .proceed(progress: nil))
        guard case .complete(let message, _) = assembly.handle(.tick, at: .milliseconds(3100)) else {
            Issue.record("expected the empty message")
            return
        }
        #expect(message.payload.isEmpty)
        #expect(message.format == .compat)
    }

    @Test func valueAfterAnUndecidedEOMIsRefusedNotGuessed() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15), undecidedSettle: .seconds(1),
                                       secure: Self.sessionAfterHello())
        _ = assembly.handle(.value(WireFormat.endOfMessage), at: .zero)
        // Looks like a secure value that overtook the first (sequence 1): held, undecided.
        _ = assembly.handle(.value([0, 1, 9, 9, 9]), at: .milliseconds(10))
        guard case .failed(let failure) = assembly.handle(.tick, at: .seconds(2)) else {
            Issue.record("expected a refusal")
            return
        }
        #expect(failure == .corrupt(.missingStartOfMessage(valuesReceived: 2)))
    }

    @Test func progressIsThrottledButTheFirstIsReported() {
        let values = Self.compatValues(CentralTestData.binary(2000)).dropLast()  // without EOM
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(5),
                                       progressInterval: .seconds(1))
        var reports: [TransferProgress] = []
        for (index, value) in values.enumerated() {
            // All values within 100 ms: only the first is due.
            switch assembly.handle(.value(value), at: .microseconds(index * 100)) {
            case .proceed(let report?), .formatDetected(_, let report?): reports.append(report.progress)
            default: break
            }
        }
        #expect(reports == [TransferProgress(bytesSoFar: 20, totalBytes: nil)])
        // A value a progress interval later is due again.
        guard case .proceed(let report?) = assembly.handle(.value(Array(repeating: 7, count: 20)), at: .seconds(2)) else {
            Issue.record("expected a progress report")
            return
        }
        #expect(report.progress == TransferProgress(bytesSoFar: 2020, totalBytes: nil))
    }

    // MARK: Bounds

    @Test(.timeLimit(.minutes(1)))
    func cleanUpThatIgnoresCancellationIsAbandonedAtItsLimit() async {
        let stuck = StuckWork()
        await boundedCleanup(limit: .milliseconds(100)) { await stuck.run() }
        // Returned although the work has not finished; release it so nothing leaks.
        #expect(!stuck.hasFinished)
        stuck.release()
    }

    @Test(.timeLimit(.minutes(1)))
    func cleanUpRunsToItsEndWhenTheCallerWasCancelled() async {
        let seen = Mutex<(cancelledInside: Bool, finished: Bool)?>(nil)
        let caller = Task {
            // Cancelled before the clean-up starts, as a torn-down transfer is.
            withUnsafeCurrentTask { $0?.cancel() }
            await boundedCleanup(limit: .seconds(600)) {
                let cancelledInside = Task.isCancelled
                // A suspension that throws when cancelled: it must not be.
                let finished = (try? await Task.sleep(for: .milliseconds(1))) != nil
                seen.withLock { $0 = (cancelledInside, finished) }
            }
            return Task.isCancelled
        }
        // Returns when the work ends, long before the limit (the test's own limit is a minute).
        let callerWasCancelled = await caller.value
        #expect(callerWasCancelled)
        let outcome = seen.withLock { $0 }
        #expect(outcome?.cancelledInside == false)
        #expect(outcome?.finished == true)
    }

    @Test(.timeLimit(.minutes(1)))
    func timeLimitPassesTheCallersCancellationToTheBody() async {
        let caller = Task {
            try await withTimeLimit(.seconds(600), onTimeout: { RoleFailure(.timedOut, "late") }) {
                try await Task.sleep(for: .seconds(600))
                return 1
            }
        }
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
    }

    @Test(.timeLimit(.minutes(1)))
    func timeLimitEndsABodyThatIgnoresCancellation() async {
        let stuck = StuckWork()
        let error = await #expect(throws: RoleFailure.self) {
            try await withTimeLimit(.milliseconds(100), onTimeout: { RoleFailure(.timedOut, "late") }) {
                await stuck.run()
                return 1
            }
        }
        #expect(error?.kind == .timedOut)
        stuck.release()
    }

    @Test func timeLimitReturnsTheBodysResultAndError() async throws {
        let value = try await withTimeLimit(.seconds(30), onTimeout: { RoleFailure(.timedOut, "late") }) { 7 }
        #expect(value == 7)
        let error = await #expect(throws: RoleFailure.self) {
            try await withTimeLimit(.seconds(30), onTimeout: { RoleFailure(.timedOut, "late") }) {
                throw RoleFailure(.ioError, "disk")
            }
        }
        #expect(error?.kind == .ioError)
    }

    // MARK: Manager state translation

    /// An adapter event that ends the start at once: the state it reaches and the failure.
    struct FailingStart: Sendable, CustomTestStringConvertible {
        let testDescription: String
        var requirement: RoleRequirement = .central
        let event: AdapterEvent
        var adapterPresent = false
        let state: ManagerState
        /// Checked where given.
        var reason: ManagerStateReason?
        let failure: FailureKind
    }

    @Test("an adapter event that fails the start at once", arguments: [
        FailingStart(testDescription: "bluetoothd absent at start fails fast",
                     event: .bluetoothdVanished, state: .resetting, failure: .unavailable),
        FailingStart(testDescription: "bluetoothd without an adapter is unsupported",
                     event: .bluetoothdAppeared, state: .unsupported, reason: .noAdapter, failure: .unavailable),
        FailingStart(testDescription: "access denied is unauthorized", requirement: .peripheral,
                     event: .accessDenied, adapterPresent: true, state: .unauthorized, failure: .permissionDenied),
    ])
    func startFailsAtOnce(_ start: FailingStart) {
        var translator = ManagerInputTranslator(requirement: start.requirement)
        let transitions = translator.handle(start.event, adapterPresent: { start.adapterPresent })
        #expect(transitions.map(\.to) == [start.state])
        if let reason = start.reason { #expect(transitions.last?.reason == reason) }
        #expect(transitions.last?.startupFailure?.kind == start.failure)
    }

    @Test func bluetoothdWithAnAdapterWaitsForTheAdapterReport() {
        var translator = ManagerInputTranslator(requirement: .central)
        #expect(translator.handle(.bluetoothdAppeared, adapterPresent: { true }).isEmpty)
    }

    @Test func unknownPowerStateIsIgnoredAndKnownOnesMap() {
        #expect(ManagerInputTranslator.inputs(for: .powerStateChanged("warp-speed"), adapterPresent: { true }).isEmpty)
        #expect(ManagerInputTranslator.inputs(for: .powerStateChanged("off-blocked"), adapterPresent: { true })
            == [.powerStateChanged(.offBlocked)])
        #expect(ManagerInputTranslator.inputs(for: .poweredChanged(false), adapterPresent: { true }) == [.poweredChanged(false)])
    }

    @Test func poweredOffAtStartIsWaitedFor() {
        let transition = ManagerTransition(from: .unknown, to: .poweredOff, action: .none, event: .adapterReadyPoweredOff,
                                           reason: .poweredOff)
        #expect(transition.startupFailure == nil)
        let switching = ManagerTransition(from: .unknown, to: .resetting, action: .none, event: .adapterReadyPowerChanging,
                                          reason: .powerChanging)
        #expect(switching.startupFailure == nil)
    }

    // MARK: Write types

    @Test func helloAndAckPreferConfirmedWrites() {
        #expect(Central.writeType(for: [.notify, .writeWithoutResponse]) == .command)
        #expect(Central.writeType(for: [.notify, .write]) == .request)
        #expect(Central.writeType(for: [.notify, .writeWithoutResponse, .write]) == .request)
        #expect(Central.writeType(for: [.notify]) == nil)
    }
}

/// The sinks: whole messages or nothing, clear failures.
@Suite struct CentralSinkTests {
    static func message(_ bytes: [UInt8]) -> ReceivedMessage {
        ReceivedMessage(payload: bytes, format: .compat)
    }

    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("central-sink-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func descriptorSinkWritesEveryByte() async throws {
        var fds: [Int32] = [-1, -1]
        // Close-on-exec: a process another test spawns meanwhile must not keep the write end open.
        #expect(pipe(&fds) == 0)
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let readEnd = fds[0]
        let writeEnd = fds[1]
        defer { close(readEnd) }
        let payload = CentralTestData.binary(100_000)   // more than a pipe buffer holds
        // The reader blocks in read(2): on a thread of its own, not the cooperative pool, whose
        // few threads the sink's blocking write and other tests may all be holding.
        let collected = Mutex<[UInt8]>([])
        let readerDone = DispatchSemaphore(value: 0)
        let reader = Thread {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(readEnd, &buffer, buffer.count)
                if count <= 0 { break }
                collected.withLock { $0 += buffer[0..<count] }
            }
            readerDone.signal()
        }
        reader.start()
        let sink = FileDescriptorSink(fileDescriptor: writeEnd, name: "a pipe")
        let stored = try await sink.store(Self.message(payload), sequence: 1, from: nil)
        close(writeEnd)
        #expect(stored == nil)
        readerDone.wait()
        #expect(collected.withLock { $0 } == payload)
    }

    @Test func descriptorSinkReportsABrokenPipe() async throws {
        signal(SIGPIPE, SIG_IGN)
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        close(fds[0])
        defer { close(fds[1]) }
        let sink = FileDescriptorSink(fileDescriptor: fds[1], name: "a pipe")
        let error = await #expect(throws: SinkFailure.self) {
            _ = try await sink.store(Self.message([1, 2, 3]), sequence: 1, from: nil)
        }
        #expect(error?.kind == .ioError)
        #expect(error?.userMessage.contains("broken pipe") == true)
    }

    @Test func singleFileSinkReplacesTheFileWhole() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let target = directory.appendingPathComponent("out.bin")
        try Data("old content".utf8).write(to: target)
        let sink = try SingleFileSink(path: .init(target.path))
        let payload = CentralTestData.binary(3000)
        let stored = try await sink.store(Self.message(payload), sequence: 1, from: nil)
        #expect(stored == target.path)
        #expect(try [UInt8](Data(contentsOf: target)) == payload)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["out.bin"])
    }

    @Test func singleFileSinkRefusesAMissingDirectoryUpFront() {
        let error = #expect(throws: SinkFailure.self) {
            _ = try SingleFileSink(path: .init("/nonexistent-\(UUID().uuidString)/out.txt"))
        }
        // Cannot create (73), as the exit statuses say.
        #expect(error?.kind == .cannotCreate)
        #expect(error?.userMessage.contains("does not exist") == true)
    }

    @Test func outputDirectoryNamesSayTextOrBinary() {
        let date = Date(timeIntervalSince1970: 1_700_000_000)
        #expect(OutputDirectorySink.fileName(sequence: 3, isText: true, date: date) == "message-20231114-221320-3.txt")
        #expect(OutputDirectorySink.fileName(sequence: 1, isText: false, date: date) == "message-20231114-221320-1.bin")
    }

    @Test func outputDirectorySinkNeverOverwrites() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let sink = try OutputDirectorySink(path: .init(directory.path))
        let first = try await sink.store(Self.message(Array("one".utf8)), sequence: 1, from: nil)
        let second = try await sink.store(Self.message(Array("two".utf8)), sequence: 1, from: nil)
        #expect(first != second)
        #expect(try Set(FileManager.default.contentsOfDirectory(atPath: directory.path)).count == 2)
    }
}

/// Work that waits, ignoring cancellation, until released: an unresponsive D-Bus peer.
private final class StuckWork: Sendable {
    private let state = Mutex<(finished: Bool, continuation: CheckedContinuation<Void, Never>?, released: Bool)>(
        (false, nil, false))

    var hasFinished: Bool { state.withLock { $0.finished } }

    func run() async {
        await withCheckedContinuation { continuation in
            state.withLock { state in
                if state.released {
                    continuation.resume()
                } else {
                    state.continuation = continuation
                }
            }
        }
        state.withLock { $0.finished = true }
    }

    func release() {
        state.withLock { state in
            state.released = true
            state.continuation?.resume()
            state.continuation = nil
        }
    }
}

extension PeerBook {
    /// The earliest moment after `now` when a peer now backing off becomes eligible.
    fileprivate func nextEligibility(after now: Duration) -> Duration? {
        records.values.map(\.notBefore).filter { $0 > now }.min()
    }
}
