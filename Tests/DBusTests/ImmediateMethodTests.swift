import DBus
import Synchronization
import Testing

/// Methods whose calls are taken on the event loop as they are read (`DBusMethod.Body.immediate`)
/// and answered through a `DBusPendingReply`.
@Suite struct ImmediateMethodTests {
    private static let interface = "org.example.Immediate"

    /// Exports `/object` with `Take(u) → u`, handled by `take`.
    private static func fixture(
        _ take: @escaping @Sendable (DBusMethodCall, DBusPendingReply) -> Void
    ) async throws -> BusFixture {
        try await BusFixture.start { connection in
            try connection.export([DBusInterface(name: interface, methods: [
                DBusMethod(name: "Take", in: "u", out: "u", immediate: take),
            ])], at: "/object")
        }
    }

    @Test("calls reach the method in the order they were sent")
    func inOrder() async throws {
        let taken = Mutex<[UInt32]>([])
        let fixture = try await Self.fixture { call, reply in
            let number = call.arguments.first?.uint32 ?? .max
            taken.withLock { $0.append(number) }
            reply.succeed([.uint32(number)])
        }
        defer { fixture.stop() }
        let count: UInt32 = 300
        for number in 0..<count {
            try await fixture.client.callWithoutReply(destination: fixture.server.uniqueName, path: "/object",
                                                      interface: Self.interface, method: "Take",
                                                      arguments: [.uint32(number)])
        }
        // Sent after the others, answered after they were taken.
        #expect(try await fixture.call("/object", Self.interface, "Take", [.uint32(count)]) == [.uint32(count)])
        #expect(taken.withLock { $0 } == Array(0...count))
    }

    @Test("a reply answered later, from another task, goes out once")
    func answeredLater() async throws {
        let (replies, replySink) = AsyncStream<DBusPendingReply>.makeStream()
        let fixture = try await Self.fixture { _, reply in replySink.yield(reply) }
        defer { fixture.stop() }
        async let answer = fixture.call("/object", Self.interface, "Take", [.uint32(1)])
        var iterator = replies.makeAsyncIterator()
        let reply = try #require(await iterator.next())
        #expect(!reply.isAnswered)
        reply.succeed([.uint32(7)])
        reply.fail(DBusError.failed("too late"))
        #expect(reply.isAnswered)
        #expect(try await answer == [.uint32(7)])
    }

    @Test("a reply dropped unanswered answers with an error at once")
    func droppedReply() async throws {
        let fixture = try await Self.fixture { _, _ in }
        defer { fixture.stop() }
        let started = ContinuousClock.now
        let error = await #expect(throws: DBusError.self) {
            try await fixture.call("/object", Self.interface, "Take", [.uint32(1)])
        }
        #expect(error?.name == DBusError.failedName)
        #expect(ContinuousClock.now - started < .seconds(5))
    }

    @Test("an answer of the wrong signature becomes Failed")
    func wrongSignature() async throws {
        let fixture = try await Self.fixture { _, reply in reply.succeed([.string("not a u")]) }
        defer { fixture.stop() }
        let error = await #expect(throws: DBusError.self) {
            try await fixture.call("/object", Self.interface, "Take", [.uint32(1)])
        }
        #expect(error?.name == DBusError.failedName)
    }
}
