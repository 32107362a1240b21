import Foundation
import Glibc
import Testing

@testable import DaemonSupport

/// A datagram socket bound where systemd would listen, reading what the notifier sends.
final class NotifySocket: Sendable {
    let address: String
    let fd: Int32
    private let directory: String?

    /// A socket file in a fresh temporary directory.
    init(directory: String) throws {
        self.directory = directory
        address = directory + "/notify"
        fd = try Self.bind(address)
    }

    /// An abstract socket (`@name`).
    init(abstractName: String) throws {
        directory = nil
        address = "@" + abstractName
        fd = try Self.bind(address)
    }

    private static func bind(_ address: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.init(rawValue: errno)!) }
        var socketAddress = try #require(UnixSocketAddress(address))
        let result = socketAddress.withSockaddr { Glibc.bind(fd, $0, $1) }
        guard result == 0 else { throw POSIXError(.init(rawValue: errno)!) }
        // A hang guard only: a test that waits for a datagram fails instead of hanging. Long,
        // because the datagram comes from a task on the cooperative pool, which a loaded
        // 2-core machine running the whole suite beside a virtual lab can keep busy for tens
        // of seconds (seen: 30 s passed without the first ping).
        var timeout = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// The next datagram; with `wait: false`, nil when none is queued. A datagram sent on a
    /// local socket is queued before `sendto` returns, so no waiting is needed after a send.
    func receive(wait: Bool = false) -> String? {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = recv(fd, &buffer, buffer.count, wait ? 0 : Int32(MSG_DONTWAIT))
        guard count >= 0 else { return nil }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    /// Waits for the next datagram on a thread of its own: a blocking `recv` on the cooperative
    /// pool could starve the very task that is to send the datagram (2 cores, tests in parallel).
    func receiveOffPool() async -> String? {
        await withCheckedContinuation { continuation in
            let thread = Thread { continuation.resume(returning: self.receive(wait: true)) }
            thread.start()
        }
    }

    deinit {
        close(fd)
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }
}

func makeTemporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "bletransfer-test-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

@Suite struct SystemdNotifierTests {
    @Test func withoutNotifySocketEverythingIsANoOp() throws {
        let notifier = SystemdNotifier(environment: ["WATCHDOG_USEC": "1000000"])
        #expect(!notifier.isActive)
        #expect(notifier.watchdogTimeout == nil)
        #expect(notifier.watchdogPingInterval == nil)
        try notifier.ready(status: "idle")
        try notifier.stopping()
        try notifier.watchdogPing()
    }

    @Test func sendsExactDatagramsToAPathSocket() throws {
        let socket = try NotifySocket(directory: makeTemporaryDirectory())
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.address])
        #expect(notifier.isActive)

        try notifier.ready(status: "receiving on hci0")
        #expect(socket.receive() == "READY=1\nSTATUS=receiving on hci0")
        try notifier.ready()
        #expect(socket.receive() == "READY=1")
        try notifier.status("3 messages\nreceived")
        #expect(socket.receive() == "STATUS=3 messages received")
        try notifier.stopping(status: "shutting down")
        #expect(socket.receive() == "STOPPING=1\nSTATUS=shutting down")
        try notifier.notify([.stopping, .ready])
        #expect(socket.receive() == "STOPPING=1\nREADY=1")
        #expect(socket.receive() == nil)
    }

    @Test func sendsToAnAbstractSocket() throws {
        let socket = try NotifySocket(abstractName: "bletransfer-test-" + UUID().uuidString)
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.address])
        try notifier.ready(status: "ok")
        #expect(socket.receive() == "READY=1\nSTATUS=ok")
    }

    @Test func watchdogPingsOnlyWhenTheWatchdogIsOurs() throws {
        let socket = try NotifySocket(directory: makeTemporaryDirectory())
        let withoutWatchdog = SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.address])
        try withoutWatchdog.watchdogPing()
        #expect(socket.receive() == nil)

        let notifier = SystemdNotifier(
            environment: ["NOTIFY_SOCKET": socket.address, "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"],
            processID: 4242)
        #expect(notifier.watchdogTimeout == .seconds(30))
        #expect(notifier.watchdogPingInterval == .seconds(15))
        try notifier.watchdogPing()
        #expect(socket.receive() == "WATCHDOG=1")
    }

    @Test(arguments: [
        (["WATCHDOG_USEC": "5000000"], Duration?.some(.seconds(5))),
        (["WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "100"], .seconds(5)),
        (["WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "101"], nil),
        (["WATCHDOG_USEC": "5000000", "WATCHDOG_PID": "x"], nil),
        (["WATCHDOG_USEC": "0"], nil),
        (["WATCHDOG_USEC": "-5"], nil),
        (["WATCHDOG_USEC": "five"], nil),
        ([:], nil),
    ])
    func parsesWatchdogEnvironment(environment: [String: String], expected: Duration?) {
        #expect(SystemdNotifier.watchdogTimeout(environment: environment, processID: 100) == expected)
    }

    @Test func keepWatchdogAlivePingsUntilCancelled() async throws {
        let socket = try NotifySocket(directory: makeTemporaryDirectory())
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": socket.address, "WATCHDOG_USEC": "20000"])
        let pinger = Task { await notifier.keepWatchdogAlive() }
        #expect(await socket.receiveOffPool() == "WATCHDOG=1")
        #expect(await socket.receiveOffPool() == "WATCHDOG=1")
        pinger.cancel()
        await pinger.value
    }

    @Test func keepWatchdogAliveReturnsAtOnceWithoutWatchdog() async {
        await SystemdNotifier(environment: [:]).keepWatchdogAlive()
    }

    @Test(arguments: ["vsock:2:1234", "relative/path", "@", "/" + String(repeating: "x", count: 200)])
    func rejectsAddressesItCannotUse(address: String) {
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": address])
        #expect(throws: SystemdNotifyError.unsupportedSocketAddress(address)) { try notifier.ready() }
    }

    @Test func reportsAMissingSocket() throws {
        let path = try makeTemporaryDirectory() + "/absent"
        let notifier = SystemdNotifier(environment: ["NOTIFY_SOCKET": path])
        #expect(throws: SystemdNotifyError.sendFailed(path, .noSuchFileOrDirectory)) { try notifier.ready() }
    }
}
