import DBus
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
        #expect(error?.isTimeout == true)
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
}
