import DBus
import Testing

/// BlueZ calls back into our exported objects (GetManagedObjects) before it answers our own
/// RegisterApplication call: the loop must serve inbound calls while ours waits.
@Suite struct ReentrancyTests {
    @Test func registerApplicationStyleCallback() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let app = fixture.client  // the application: exports a tree, then registers it
        let manager = fixture.server  // plays bluetoothd
        try GattLikeApplication().export(on: app)
        try manager.export(
            [DBusInterface(name: "org.bluez.GattManager1", methods: [
                DBusMethod(name: "RegisterApplication", in: "oa{sv}") { call in
                    // Before answering, read the caller's whole tree, like bluetoothd does.
                    let reply = try await manager.call(
                        destination: call.sender, path: call.arguments[0].objectPath!,
                        interface: "org.freedesktop.DBus.ObjectManager", method: "GetManagedObjects")
                    guard let objects = reply.first?.managedObjects, objects.count == 2 else {
                        throw DBusError(name: "org.bluez.Error.Failed", message: "application tree not found")
                    }
                    let uuid = try await manager.call(
                        destination: call.sender, path: "/app/service0/char0",
                        interface: "org.freedesktop.DBus.Properties", method: "Get",
                        arguments: [.string("org.bluez.GattCharacteristic1"), .string("UUID")])
                    guard uuid.first?.string == "08590f7e-db05-467e-8757-72f6faeb13d4" else {
                        throw DBusError(name: "org.bluez.Error.Failed", message: "wrong characteristic")
                    }
                    return []
                }
            ])], at: "/org/bluez/hci0")

        let reply = try await app.call(
            destination: manager.uniqueName, path: "/org/bluez/hci0", interface: "org.bluez.GattManager1",
            method: "RegisterApplication", arguments: [.objectPath("/app"), .vardict([:])])
        #expect(reply == [])
    }

    /// Calls nested across two connections, ten levels deep, each handler waiting on the next.
    @Test func deepPingPong() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        for (me, peer) in [(fixture.server, fixture.client), (fixture.client, fixture.server)] {
            let peerName = peer.uniqueName
            try me.export(
                [DBusInterface(name: "org.example.Bounce", methods: [
                    DBusMethod(name: "Bounce", in: "u", out: "u") { call in
                        let depth = call.arguments[0].uint32!
                        if depth == 0 { return [.uint32(0)] }
                        let inner = try await me.call(
                            destination: peerName, path: "/b", interface: "org.example.Bounce", method: "Bounce",
                            arguments: [.uint32(depth - 1)])
                        return [.uint32(inner[0].uint32! + 1)]
                    }
                ])], at: "/b")
        }
        let reply = try await fixture.call("/b", "org.example.Bounce", "Bounce", [.uint32(10)])
        #expect(reply == [.uint32(10)])
    }

    /// A handler that calls its own connection's exported object through the bus.
    @Test func callingOurselves() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let server = fixture.server
        let selfName = server.uniqueName
        try server.export(
            [DBusInterface(name: "org.example.Self", methods: [
                DBusMethod(name: "Inner", out: "s") { _ in [.string("inner")] },
                DBusMethod(name: "Outer", out: "s") { _ in
                    let inner = try await server.call(
                        destination: selfName, path: "/s", interface: "org.example.Self", method: "Inner")
                    return [.string("outer+" + inner[0].string!)]
                },
            ])], at: "/s")
        #expect(try await fixture.call("/s", "org.example.Self", "Outer") == [.string("outer+inner")])
    }
}
