@testable import Daemon
import BlueZ
import DaemonSupport
import Foundation
@testable import Machines
import Roles
@testable import Storage
import Synchronization
import SystemPackage
import Testing
import Transfer

/// The receiver daemon's sink, the status line, and the supervisor's retry loop.
@Suite(.timeLimit(.minutes(1)))
struct DaemonPiecesTests {
    @Test("the inbox sink stores each message atomically under an InboxFileName, numbered across the run")
    func inboxSinkNamesAndStores() async throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-inbox-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: url) }
        let fixed = Date(timeIntervalSince1970: 1_738_324_805.042)   // 2025-01-31 12:00:05.042 UTC
        let sink = InboxSink(directory: try OutputDirectory(path: FilePath(url.path)), now: { fixed })
        let text = ReceivedMessage(payload: Array("hello".utf8), format: .compat)
        let binary = ReceivedMessage(payload: [0, 159, 146, 150], format: .compat)
        // The central's own sequence restarts with every role restart; the sink's does not.
        let first = try #require(try await sink.store(text, sequence: 1, from: nil))
        let second = try #require(try await sink.store(binary, sequence: 1, from: nil))
        #expect(first.hasSuffix("/message-20250131-120005.042-0001.txt"))
        #expect(second.hasSuffix("/message-20250131-120005.042-0002.bin"))
        #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: second))) == [0, 159, 146, 150])
        // Nothing but the two messages: no partial files left.
        #expect(try FileManager.default.contentsOfDirectory(atPath: url.path).sorted()
            == ["message-20250131-120005.042-0001.txt", "message-20250131-120005.042-0002.bin"])
        #expect(sink.storedCount == 2)
    }

    @Test("the status line says role, adapter, state, count, what is offered, memory and why it waits")
    func statusLine() {
        var status = DaemonStatus(role: .sender, adapterName: "hci0", state: .poweredOn, messages: 3,
                                  servingFile: "report.pdf", residentBytes: 15 * 1024 * 1024 + 200 * 1024)
        #expect(status.line == "sender on hci0: poweredOn, 3 files sent, offering report.pdf, RSS 15.2 MiB")
        status.servingFile = nil
        #expect(status.line == "sender on hci0: poweredOn, 3 files sent, outbox empty, RSS 15.2 MiB")
        var receiver = DaemonStatus(role: .receiver, adapterName: nil, state: .unauthorized, messages: 1)
        receiver.waitingReason = "access denied"
        #expect(receiver.line == "receiver on first adapter: unauthorized, 1 message received; waiting: access denied")
    }

    final class Reports: Sendable {
        private let list = Mutex<[DaemonReport]>([])
        func append(_ report: DaemonReport) { list.withLock { $0.append(report) } }
        var waiting: [(FailureKind, String, Duration)] {
            list.withLock { reports in
                reports.compactMap { if case .waiting(let kind, let message, _, let delay) = $0 { (kind, message, delay) } else { nil } }
            }
        }
    }

    @Test("without a bus the supervisor reports waiting with growing pauses and never gives up; cancelling ends it")
    func supervisorWaitsAndRetries() async throws {
        let reports = Reports()
        let attempts = Mutex(0)
        let (enoughAttempts, signal) = AsyncStream<Void>.makeStream()
        var supervisor = DaemonSupervisor(
            openSession: {
                let count = attempts.withLock { value in
                    value += 1
                    return value
                }
                if count == 4 { signal.yield() }
                throw BluetoothError.systemBusUnavailable("no bus here")
            },
            attempt: { _, _ in Issue.record("no session, no attempt") },
            report: { reports.append($0) })
        supervisor.backoff = BackoffPolicy(initial: .milliseconds(1), maximum: .milliseconds(4))
        let running = Task { await supervisor.run() }
        for await _ in enoughAttempts { break }
        running.cancel()
        await running.value
        let waiting = reports.waiting
        #expect(waiting.count >= 3)
        #expect(waiting.allSatisfy { $0.0 == .unavailable && $0.1.contains("no bus here") })
        #expect(waiting.prefix(3).map(\.2) == [.milliseconds(1), .milliseconds(2), .milliseconds(4)])
    }

    /// The daemon's waiting line names Bluetooth's problem as `status` does, with its fix as
    /// the hint, as send and receive do.
    @Test("a Bluetooth failure is reported waiting in status's words, with its fix as the hint")
    func waitingCarriesStatussHint() async throws {
        let reports = Mutex<[DaemonReport]>([])
        let (reported, signal) = AsyncStream<Void>.makeStream()
        var supervisor = DaemonSupervisor(
            openSession: { throw BluetoothError.noAdapter },
            attempt: { _, _ in Issue.record("no session, no attempt") },
            report: { report in
                reports.withLock { $0.append(report) }
                signal.yield()
            })
        supervisor.backoff = BackoffPolicy(initial: .milliseconds(1), maximum: .milliseconds(1))
        supervisor.diagnose = { ("no Bluetooth adapter: the kernel has no Bluetooth (a VM or a container?)", "run on a host with one") }
        let running = Task { await supervisor.run() }
        for await _ in reported { break }
        running.cancel()
        await running.value
        guard case .waiting(let kind, let message, let hint, _)? = reports.withLock({ $0.first }) else {
            Issue.record("no waiting report")
            return
        }
        #expect(kind == .unavailable)
        #expect(message == "no Bluetooth adapter: the kernel has no Bluetooth (a VM or a container?)")
        #expect(hint == "run on a host with one")
    }

    @Test("access denied is classified as permission denied (state unauthorized), unknown errors as software")
    func classification() {
        #expect(DaemonSupervisor.classify(BluetoothError.accessDenied("denied by policy")).kind == .permissionDenied)
        #expect(DaemonSupervisor.classify(RoleFailure(.usage, "unknown adapter hci7")).kind == .usage)
        #expect(DaemonSupervisor.classify(BluetoothError.bluetoothdNotRunning).kind == .unavailable)
        struct Odd: Error {}
        #expect(DaemonSupervisor.classify(Odd()).kind == .software)
    }
}

extension InboxSink {
    /// How many messages were stored.
    var storedCount: Int { sequence.withLock { $0 } }
}
