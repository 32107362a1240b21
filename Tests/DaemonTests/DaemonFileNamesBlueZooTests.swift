@testable import Daemon
import DaemonSupport
import Foundation
@testable import Machines
import Roles
@testable import Storage
import Storage
import SystemPackage
import Testing
import TestSupport
import Transfer
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// The daemons' halves in one process over BlueZoo, in the secure mode: an outbox file's name
/// and modification time arrive in the inbox.
@Suite(.serialized, .enabled(if: BlueZooBus.isAvailable, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .timeLimit(.minutes(2)))
struct DaemonFileNamesBlueZooTests {
    @Test("outbox photo.jpg → inbox photo.jpg with its mtime; the outbox moves it to sent/")
    func outboxNameArrivesInTheInbox() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-names-e2e-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: root) }
        let outbox = root.appendingPathComponent("outbox")
        let inbox = root.appendingPathComponent("inbox")
        try FileManager.default.createDirectory(at: outbox, withIntermediateDirectories: true)
        let photo = outbox.appendingPathComponent("photo.jpg").path
        let bytes = (0..<6000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try Data(bytes).write(to: URL(fileURLWithPath: photo))
        var times = [timespec(tv_sec: 0, tv_nsec: 0), timespec(tv_sec: 1_500_000_000, tv_nsec: 5)]
        #expect(utimensat(AT_FDCWD, photo, &times, 0) == 0)

        let senderKey = HostIdentity(name: "sender")
        let receiverKey = HostIdentity(name: "receiver")
        func peers(_ identity: HostIdentity) -> AuthorizedPeers { .listing(identity) }

        // The outbox reports the move into sent/: the signal that the sender counted the delivery.
        let (moves, movesContinuation) = AsyncStream<String>.makeStream()
        let source = try OutboxMessageSource(directory: FilePath(outbox.path), maximumFileSize: 1 << 20, settleTime: .zero) {
            if case .moved(let file, _) = $0 { movesContinuation.yield(file.name) }
        }
        let senderSession = try await bus.openSession()
        defer { senderSession.close() }
        var senderConfiguration = PeripheralConfiguration(adapterName: "hci0", fallbackValueInterval: .zero)
        senderConfiguration.secureMode = SecureModePolicy(identity: senderKey, authorizedPeers: peers(receiverKey),
                                                          requiresSecure: true)
        let peripheral = Peripheral(configuration: senderConfiguration, session: senderSession)
        let sending = Task { try await peripheral.run(source: source) }
        defer { sending.cancel() }

        let receiverSession = try await bus.openSession()
        defer { receiverSession.close() }
        var receiverConfiguration = CentralConfiguration(
            adapterName: "hci1", messageCount: 1, idleTimeout: .seconds(5), connectTimeout: .seconds(10),
            servicesResolveTimeout: .seconds(10), backoff: BackoffPolicy(initial: .milliseconds(100), maximum: .seconds(1)))
        receiverConfiguration.secureMode = SecureModePolicy(identity: receiverKey, authorizedPeers: peers(senderKey),
                                                            requiresSecure: true)
        let central = Central(configuration: receiverConfiguration, session: receiverSession)
        let sink = InboxSink(directory: try OutputDirectory(path: FilePath(inbox.path)))
        #expect(try await central.run(sink: sink, timeout: .seconds(60)) == 1)

        let stored = inbox.appendingPathComponent("photo.jpg").path
        #expect(try FileManager.default.contentsOfDirectory(atPath: inbox.path) == ["photo.jpg"])
        #expect(FileManager.default.contents(atPath: stored) == Data(bytes))
        var status = stat()
        #expect(stat(stored, &status) == 0)
        #expect(status.st_mtim.tv_sec == 1_500_000_000 && status.st_mtim.tv_nsec == 5)

        var moved: String?
        for await name in moves {
            moved = name
            break
        }
        #expect(moved == "photo.jpg")
        #expect(FileManager.default.fileExists(atPath: outbox.appendingPathComponent("sent/photo.jpg").path))
    }
}
