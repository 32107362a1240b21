import DBus
import Synchronization
import Testing

/// A small exported tree shaped like a BlueZ GATT application.
struct GattLikeApplication {
    final class Storage: Sendable {
        let value = Mutex<[UInt8]>([0x01])
    }
    let storage = Storage()

    func export(on connection: DBusConnection) throws {
        let storage = self.storage
        try connection.exportObjectManager(at: "/app")
        try connection.export(
            [DBusInterface(name: "org.bluez.GattService1", properties: [
                DBusProperty(name: "UUID", signature: "s", get: { .string("e20a39f4-73f5-4bc4-a12f-17d1ad07a961") }),
                DBusProperty(name: "Primary", signature: "b", get: { .boolean(true) }),
            ])], at: "/app/service0")
        try connection.export(
            [DBusInterface(
                name: "org.bluez.GattCharacteristic1",
                methods: [
                    DBusMethod(name: "ReadValue", in: "a{sv}", out: "ay") { _ in [.bytes(storage.value.withLock { $0 })] }
                ],
                properties: [
                    DBusProperty(name: "UUID", signature: "s", get: { .string("08590f7e-db05-467e-8757-72f6faeb13d4") }),
                    DBusProperty(name: "Service", signature: "o", get: { .objectPath("/app/service0") }),
                    DBusProperty(name: "Flags", signature: "as", get: { .strings(["notify", "write-without-response"]) }),
                    DBusProperty(
                        name: "Value", signature: "ay", access: .readWrite,
                        get: { .bytes(storage.value.withLock { $0 }) },
                        set: { value in storage.value.withLock { $0 = value.bytes ?? [] } }),
                ],
                signals: [DBusSignalDescription(name: "Ready", signature: "u")])
            ], at: "/app/service0/char0")
    }
}

@Suite struct ExportTests {
    @Test func propertiesGetGetAllSet() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let properties = "org.freedesktop.DBus.Properties"
        let characteristic = "org.bluez.GattCharacteristic1"

        let uuid = try await fixture.call("/app/service0/char0", properties, "Get", [.string(characteristic), .string("UUID")])
        #expect(uuid == [.variant(.string("08590f7e-db05-467e-8757-72f6faeb13d4"))])

        try await fixture.call(
            "/app/service0/char0", properties, "Set", [.string(characteristic), .string("Value"), .variant(.bytes([9, 8]))])
        let all = try await fixture.call("/app/service0/char0", properties, "GetAll", [.string(characteristic)])
        #expect(all.first?.vardict?["Value"]?.bytes == [9, 8])
        #expect(all.first?.vardict?["Flags"]?.strings == ["notify", "write-without-response"])

        let readOnly = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "/app/service0/char0", properties, "Set", [.string(characteristic), .string("UUID"), .variant(.string("x"))])
        }
        #expect(readOnly?.name == DBusError.propertyReadOnlyName)
        let wrongType = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "/app/service0/char0", properties, "Set", [.string(characteristic), .string("Value"), .variant(.string("x"))])
        }
        #expect(wrongType?.name == DBusError.invalidArgsName)
        let unknown = await #expect(throws: DBusError.self) {
            try await fixture.call("/app/service0/char0", properties, "Get", [.string(characteristic), .string("Nope")])
        }
        #expect(unknown?.name == DBusError.unknownPropertyName)
    }

    @Test func getManagedObjectsListsTheTree() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let reply = try await fixture.call("/app", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        let objects = try #require(reply.first?.managedObjects)
        #expect(Set(objects.keys) == ["/app/service0", "/app/service0/char0"])
        #expect(objects["/app/service0"]?["org.bluez.GattService1"]?["Primary"]?.bool == true)
        #expect(objects["/app/service0/char0"]?["org.bluez.GattCharacteristic1"]?["Service"]?.objectPath == "/app/service0")
    }

    @Test func introspectionDescribesObjectsAndChildren() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let root = try await fixture.call("/", "org.freedesktop.DBus.Introspectable", "Introspect")
        #expect(root.first?.string?.contains("<node name=\"app\"/>") == true)
        let xml = try #require(try await fixture.call("/app/service0/char0", "org.freedesktop.DBus.Introspectable", "Introspect").first?.string)
        #expect(xml.contains("<interface name=\"org.bluez.GattCharacteristic1\">"))
        #expect(xml.contains("<method name=\"ReadValue\">"))
        #expect(xml.contains("<arg type=\"a{sv}\" direction=\"in\"/>"))
        #expect(xml.contains("<property name=\"Value\" type=\"ay\" access=\"readwrite\"/>"))
        #expect(xml.contains("<signal name=\"Ready\">"))
        #expect(xml.contains("org.freedesktop.DBus.Properties"))
        let ping = try await fixture.call("/anything", "org.freedesktop.DBus.Peer", "Ping")
        #expect(ping == [])
    }

    @Test func exportRejectsBadDescriptions() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        #expect(throws: DBusError.self) { try fixture.server.export([DBusInterface(name: "nodots")], at: "/x") }
        #expect(throws: DBusError.self) {
            try fixture.server.export([DBusInterface(name: "org.example.A"), DBusInterface(name: "org.example.A")], at: "/x")
        }
        #expect(throws: DBusError.self) {
            try fixture.server.export(
                [DBusInterface(name: "org.example.A", methods: [DBusMethod(name: "bad-name") { _ in [] }])], at: "/x")
        }
        #expect(throws: DBusError.self) {
            try fixture.server.export(
                [DBusInterface(name: "org.example.A", properties: [DBusProperty(name: "P", signature: "ss", get: { .string("") })])],
                at: "/x")
        }
    }

    @Test func unexportedObjectIsGone() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        fixture.server.unexport("/app/service0/char0")
        let error = await #expect(throws: DBusError.self) {
            try await fixture.call("/app/service0/char0", "org.bluez.GattCharacteristic1", "ReadValue", [.vardict([:])])
        }
        #expect(error?.name == DBusError.unknownObjectName)
        let reply = try await fixture.call("/app", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        #expect(reply.first?.managedObjects.map { Set($0.keys) } == ["/app/service0"])
    }

    // MARK: Inspected by clients we did not write

    @Test func dbusSendSeesTheManagedObjects() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let (status, output) = try await runTool(
            "/usr/bin/dbus-send",
            ["--bus=\(fixture.bus.address)", "--print-reply", "--dest=\(fixture.server.uniqueName)", "/app",
             "org.freedesktop.DBus.ObjectManager.GetManagedObjects"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("object path \"/app/service0/char0\""))
        #expect(output.contains("string \"org.bluez.GattCharacteristic1\""))
        #expect(output.contains("string \"08590f7e-db05-467e-8757-72f6faeb13d4\""))
        #expect(output.contains("string \"write-without-response\""))
    }

    @Test func busctlWalksAndIntrospectsTheTree() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let tree = try await runTool(
            "/usr/bin/busctl", ["--address=\(fixture.bus.address)", "tree", "--list", fixture.server.uniqueName])
        #expect(tree.status == 0, "\(tree.output)")
        #expect(tree.output.contains("/app/service0/char0"))

        let introspection = try await runTool(
            "/usr/bin/busctl",
            ["--address=\(fixture.bus.address)", "introspect", fixture.server.uniqueName, "/app/service0/char0",
             "org.bluez.GattCharacteristic1"])
        #expect(introspection.status == 0, "\(introspection.output)")
        // busctl reads every property through Properties.GetAll and prints the values.
        let lines = introspection.output.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true) }
        let flags = lines.first { $0.first == ".Flags" }
        #expect(flags?.contains("\"notify\"") == true, "\(introspection.output)")
        #expect(lines.contains { $0.first == ".ReadValue" && $0.contains("method") })

        let set = try await runTool(
            "/usr/bin/busctl",
            ["--address=\(fixture.bus.address)", "set-property", fixture.server.uniqueName, "/app/service0/char0",
             "org.bluez.GattCharacteristic1", "Value", "ay", "2", "170", "187"])
        #expect(set.status == 0, "\(set.output)")
        let value = try await fixture.call(
            "/app/service0/char0", "org.freedesktop.DBus.Properties", "Get",
            [.string("org.bluez.GattCharacteristic1"), .string("Value")])
        #expect(value.first?.bytes == [170, 187])
    }

    @Test func gdbusIntrospectsTheObject() async throws {
        let fixture = try await BusFixture.start(exporting: GattLikeApplication().export(on:))
        defer { fixture.stop() }
        let (status, output) = try await runTool(
            "/usr/bin/gdbus",
            ["introspect", "--address", fixture.bus.address, "--dest", fixture.server.uniqueName,
             "--object-path", "/app", "--recurse"])
        #expect(status == 0, "\(output)")
        #expect(output.contains("interface org.bluez.GattService1"))
        #expect(output.contains("readonly s UUID = 'e20a39f4-73f5-4bc4-a12f-17d1ad07a961';"))
        #expect(output.contains("readwrite ay Value"))
        #expect(output.contains("ReadValue(in  a{sv} arg_0,") || output.contains("ReadValue(in  a{sv}"))
    }
}
