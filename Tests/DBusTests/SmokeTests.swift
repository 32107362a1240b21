import DBus
import Testing
import TestSupport

@Suite struct SmokeTests {
    @Test func callTheBusAndOurselves() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.stop() }
        let server = try await DBusConnection.connect(address: bus.address)
        let client = try await DBusConnection.connect(address: bus.address)
        defer { server.close(); client.close() }
        #expect(server.uniqueName.hasPrefix(":"))
        let id = try await client.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", method: "GetId")
        #expect(id.first?.string?.count == 32)
        try server.export(
            [DBusInterface(name: "org.example.Echo", methods: [
                DBusMethod(name: "Echo", in: "s", out: "s") { call in [call.arguments[0]] }
            ])], at: "/echo")
        let reply = try await client.call(
            destination: server.uniqueName, path: "/echo", interface: "org.example.Echo", method: "Echo",
            arguments: [.string("hi")])
        #expect(reply.first?.string == "hi")
    }
}
