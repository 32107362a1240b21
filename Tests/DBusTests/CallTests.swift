import DBus
#if canImport(Glibc)
import Glibc
#endif
import PropertyBased
import Synchronization
import Testing

@Suite struct CallTests {
    static let echo = DBusInterface(
        name: "org.example.Echo",
        methods: [
            DBusMethod(name: "Echo", in: "v", out: "v") { call in call.arguments },
            DBusMethod(name: "EchoAll", in: "av", out: "av") { call in call.arguments },
            DBusMethod(name: "Fail", in: "ss") { call in
                throw DBusError(name: call.arguments[0].string!, message: call.arguments[1].string!)
            },
            DBusMethod(name: "Crash") { _ in throw CancellationError() },
            DBusMethod(name: "Lie", out: "s") { _ in [.int32(1)] },
        ])

    @Test func randomValuesRoundTripThroughTheBus() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try fixture.server.export([Self.echo], at: "/echo")
        await propertyCheck(count: 100, input: RandomValues.arguments) { values in
            let wrapped = DBusValue.array(element: "v", values.map { .variant($0) })
            let reply = try await fixture.call("/echo", "org.example.Echo", "EchoAll", [wrapped])
            #expect(reply == [wrapped])
        }
    }

    @Test func errorRepliesKeepNameAndMessage() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try fixture.server.export([Self.echo], at: "/echo")

        let error = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "/echo", "org.example.Echo", "Fail", [.string("org.bluez.Error.InProgress"), .string("busy now")])
        }
        #expect(error == DBusError(name: "org.bluez.Error.InProgress", message: "busy now"))

        let failed = await #expect(throws: DBusError.self) { try await fixture.call("/echo", "org.example.Echo", "Crash") }
        #expect(failed?.name == DBusError.failedName)

        let lie = await #expect(throws: DBusError.self) { try await fixture.call("/echo", "org.example.Echo", "Lie") }
        #expect(lie?.name == DBusError.failedName)

        let badName = await #expect(throws: DBusError.self) {
            try await fixture.call("/echo", "org.example.Echo", "Fail", [.string("not an error name"), .string("x")])
        }
        #expect(badName?.name == DBusError.failedName)
    }

    @Test func unknownTargetsGetTheStandardErrors() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try fixture.server.export([Self.echo], at: "/echo")

        let object = await #expect(throws: DBusError.self) { try await fixture.call("/nothing", "org.example.Echo", "Echo") }
        #expect(object?.name == DBusError.unknownObjectName)
        let method = await #expect(throws: DBusError.self) { try await fixture.call("/echo", "org.example.Echo", "Nope") }
        #expect(method?.name == DBusError.unknownMethodName)
        let interface = await #expect(throws: DBusError.self) { try await fixture.call("/echo", "org.example.Other", "Echo") }
        #expect(interface?.name == DBusError.unknownInterfaceName)
        let args = await #expect(throws: DBusError.self) {
            try await fixture.call("/echo", "org.example.Echo", "Echo", [.string("not a variant")])
        }
        #expect(args?.name == DBusError.invalidArgsName)
        let service = await #expect(throws: DBusError.self) {
            try await fixture.client.call(
                destination: "org.example.Nobody", path: "/", interface: "org.example.X", method: "Y")
        }
        #expect(service?.isServiceUnknown == true)
        let invalid = await #expect(throws: DBusError.self) {
            try await fixture.client.call(destination: "bad name", path: "/", interface: "org.example.X", method: "Y")
        }
        #expect(invalid?.name == DBusError.invalidArgsName)
    }

    @Test func aCallWithoutReplyTimesOut() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let (_, release) = try fixture.exportHang()
        defer { release.open() }
        let error = await #expect(throws: DBusError.self) {
            try await fixture.call("/slow", "org.example.Slow", "Hang", timeout: .milliseconds(200))
        }
        #expect(error?.name == DBusError.timeoutName || error?.name == DBusError.noReplyName)
        // The connection is still fine afterwards, and the late reply is dropped quietly.
        release.open()
        #expect(try await fixture.call("/slow", "org.example.Slow", "Hang") == [])
    }

    @Test func cancellingTheCallerCancelsTheCall() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let entered = Gate()
        let release = Gate()
        defer { release.open() }
        try fixture.server.export(
            [DBusInterface(name: "org.example.Slow", methods: [
                DBusMethod(name: "Hang", out: "s") { _ in
                    entered.open()
                    await release.wait()
                    return [.string("late")]
                }
            ])], at: "/slow")
        let caller = Task { try await fixture.call("/slow", "org.example.Slow", "Hang") }
        await entered.wait()  // the call reached the server: it is truly pending
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        release.open()

        // Already cancelled before the call starts.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await fixture.call("/slow", "org.example.Slow", "Hang")
        }
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(try await fixture.call("/slow", "org.example.Slow", "Hang") == [.string("late")])
    }

    /// Many calls, each cancelled at a random moment: every one finishes exactly once (a
    /// continuation resumed twice would trap) with either its own reply or CancellationError.
    @Test func cancellationRacesResolveExactlyOnce() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try fixture.server.export([Self.echo], at: "/echo")
        let outcomes = await withTaskGroup(of: Bool?.self) { group in
            for index in 0..<400 {
                let call = Task {
                    try await fixture.call("/echo", "org.example.Echo", "Echo", [.variant(.int32(Int32(index)))])
                }
                group.addTask {
                    for _ in 0..<(index % 7) { await Task.yield() }
                    call.cancel()
                    do {
                        let reply = try await call.value
                        #expect(reply == [.variant(.int32(Int32(index)))])
                        return true
                    } catch is CancellationError {
                        return false
                    } catch {
                        Issue.record("unexpected \(error)")
                        return nil
                    }
                }
            }
            var outcomes: [Bool?] = []
            for await outcome in group { outcomes.append(outcome) }
            return outcomes
        }
        #expect(outcomes.count == 400)
        #expect(!outcomes.contains(nil))
        // The connection has no leftovers: it still works.
        #expect(try await fixture.call("/echo", "org.example.Echo", "Echo", [.variant(.string("ok"))]) == [.variant(.string("ok"))])
    }

    @Test func concurrentCallsAllGetTheirOwnReplies() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try fixture.server.export([Self.echo], at: "/echo")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for index in 0..<300 {
                group.addTask {
                    let reply = try await fixture.call("/echo", "org.example.Echo", "Echo", [.variant(.uint32(UInt32(index)))])
                    #expect(reply == [.variant(.uint32(UInt32(index)))])
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func closingFailsPendingCallsAndLaterOnes() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let (entered, release) = try fixture.exportHang()
        defer { release.open() }
        let pending = Task { try await fixture.call("/slow", "org.example.Slow", "Hang") }
        await entered.wait()
        fixture.client.close()
        fixture.client.close()  // idempotent
        let error = await #expect(throws: DBusError.self) { try await pending.value }
        #expect(error?.isDisconnected == true)
        await fixture.client.waitUntilDisconnected()
        #expect(!fixture.client.isConnected)
        let later = await #expect(throws: DBusError.self) { try await fixture.call("/slow", "org.example.Slow", "Hang") }
        #expect(later?.isDisconnected == true)
        #expect(throws: DBusError.self) {
            try fixture.client.emitSignal(path: "/", interface: "org.example.X", member: "Y", arguments: [])
        }
    }

    @Test func losingTheBusEndsEverything() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let (entered, release) = try fixture.exportHang()
        defer { release.open() }
        let signals = try await fixture.client.signals(matching: MatchRule(interface: "org.example.Never"))
        let pending = Task { try await fixture.call("/slow", "org.example.Slow", "Hang") }
        await entered.wait()
        fixture.bus.stop()
        await fixture.client.waitUntilDisconnected()
        let error = await #expect(throws: DBusError.self) { try await pending.value }
        #expect(error?.isDisconnected == true)
        var received = 0
        for await _ in signals { received += 1 }  // ends instead of hanging
        #expect(received == 0)
    }

    @Test func connectingToNothingFailsCleanly() async throws {
        let error = await #expect(throws: DBusError.self) {
            try await DBusConnection.connect(address: "unix:path=/nonexistent/bletransfer-test-socket")
        }
        #expect(error?.name.hasPrefix("org.freedesktop.DBus.Error.") == true)
        await #expect(throws: DBusError.self) { try await DBusConnection.connect(address: "garbage") }
    }

    @Test func aBusThatNeverAnswersHoldsUpNoOtherConnection() async throws {
        // All connections of the process share the reactor: one whose bus never authenticates
        // it (a socket nobody accepts on) waits without blocking the others, and fails as
        // disconnected once that socket goes.
        let fixture = try await BusFixture.start(exporting: { try $0.export([Self.echo], at: "/echo") })
        defer { fixture.stop() }
        let silent = try SilentSocket()
        let connecting = Task { try await DBusConnection.connect(address: "unix:path=\(silent.path)") }
        for round in 0..<20 {
            let reply = try await fixture.call("/echo", "org.example.Echo", "Echo", [.variant(.uint32(UInt32(round)))])
            #expect(reply == [.variant(.uint32(UInt32(round)))])
        }
        silent.close()
        let error = await #expect(throws: DBusError.self) { try await connecting.value }
        #expect(error?.isDisconnected == true)
    }
}

private struct SocketFailure: Error {
    let call: String
    let errno: Int32
}

/// A listening unix socket that never accepts: a connection to it completes in the kernel's
/// backlog and then hears nothing until the socket is closed.
private final class SilentSocket: Sendable {
    let path: String
    private let fd: Int32

    init() throws {
        path = "/tmp/bletransfer-silent-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw SocketFailure(call: "socket", errno: errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(fd, 4) == 0 else {
            let error = SocketFailure(call: "bind/listen", errno: errno)
            Glibc.close(fd)
            throw error
        }
    }

    func close() {
        Glibc.close(fd)
        unlink(path)
    }
}
