@testable import DBus
import Testing

extension MatchRule {
    static func propertiesChanged(sender: String?, pathNamespace: ObjectPath? = nil) -> MatchRule {
        MatchRule(sender: sender, pathNamespace: pathNamespace, interface: "org.freedesktop.DBus.Properties",
                  member: "PropertiesChanged")
    }

    static func interfacesAdded(sender: String?) -> MatchRule {
        MatchRule(sender: sender, interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded")
    }

    static func interfacesRemoved(sender: String?) -> MatchRule {
        MatchRule(sender: sender, interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesRemoved")
    }
}

@Suite struct SignalTests {
    @Test func propertiesChangedFromAWellKnownName() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        try await fixture.server.requestName("org.example.Sender")
        let other = try await DBusConnection.connect(address: fixture.bus.address)
        defer { other.close() }

        let stream = try await fixture.client.signals(
            matching: .propertiesChanged(sender: "org.example.Sender", pathNamespace: "/dev"))
        // Not from the named sender, and outside the namespace: neither must arrive.
        try other.emitPropertiesChanged(path: "/dev/a", interface: "org.example.I", changed: ["X": .int32(0)])
        try fixture.server.emitPropertiesChanged(path: "/elsewhere", interface: "org.example.I", changed: ["X": .int32(1)])
        try fixture.server.emitPropertiesChanged(
            path: "/dev/a/b", interface: "org.example.I", changed: ["X": .int32(2)], invalidated: ["Y"])

        var iterator = stream.makeAsyncIterator()
        let signal = try #require(await iterator.next())
        #expect(signal.sender == fixture.server.uniqueName)
        #expect(signal.path == "/dev/a/b")
        #expect(signal.interface == "org.freedesktop.DBus.Properties")
        #expect(signal.member == "PropertiesChanged")
        #expect(signal.arguments.count == 3)
        #expect(signal.arguments[0].string == "org.example.I")
        #expect(signal.arguments[1].vardict?["X"]?.int32 == 2)
        #expect(signal.arguments[2].strings == ["Y"])
    }

    @Test func nameOwnerChanged() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let stream = try await fixture.client.signals(matching: .nameOwnerChanged(name: "org.example.Watched"))
        try await fixture.server.requestName("org.example.Watched")
        var iterator = stream.makeAsyncIterator()
        let acquired = try #require(await iterator.next())
        #expect(acquired.arguments.map(\.string) == ["org.example.Watched", "", fixture.server.uniqueName])
        fixture.server.close()
        let lost = try #require(await iterator.next())
        #expect(lost.arguments.map(\.string) == ["org.example.Watched", fixture.server.uniqueName, ""])
    }

    @Test func ownerChangesAreFollowed() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        // Subscribed before anyone owns the name: the owner is learnt from NameOwnerChanged.
        let stream = try await fixture.client.signals(
            matching: MatchRule(sender: "org.example.Later", interface: "org.example.Beacon"))
        let owner = try await DBusConnection.connect(address: fixture.bus.address)
        defer { owner.close() }
        try await owner.requestName("org.example.Later")
        // A round-trip through the client's own loop orders this after the NameOwnerChanged.
        _ = try await fixture.client.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            method: "GetNameOwner", arguments: [.string("org.example.Later")])
        try owner.emitSignal(path: "/b", interface: "org.example.Beacon", member: "Ping", arguments: [.uint32(7)])
        var iterator = stream.makeAsyncIterator()
        let signal = try #require(await iterator.next())
        #expect(signal.arguments == [.uint32(7)])
        #expect(signal.sender == owner.uniqueName)
    }

    @Test func interfacesAddedAndRemoved() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let added = try await fixture.client.signals(matching: .interfacesAdded(sender: fixture.server.uniqueName))
        let removed = try await fixture.client.signals(matching: .interfacesRemoved(sender: fixture.server.uniqueName))
        try fixture.server.exportObjectManager(at: "/app")
        try fixture.server.export(
            [DBusInterface(name: "org.example.Thing", properties: [
                DBusProperty(name: "Name", signature: "s", get: { .string("thing one") })
            ])], at: "/app/thing")
        fixture.server.unexport("/app/thing")

        var addedIterator = added.makeAsyncIterator()
        let addition = try #require(await addedIterator.next())
        #expect(addition.path == "/app")
        #expect(addition.arguments[0].objectPath == "/app/thing")
        #expect(addition.arguments[1].interfacesAndProperties?["org.example.Thing"]?["Name"]?.string == "thing one")

        var removedIterator = removed.makeAsyncIterator()
        let removal = try #require(await removedIterator.next())
        #expect(removal.arguments[0].objectPath == "/app/thing")
        #expect(removal.arguments[1].strings == ["org.example.Thing"])
    }

    @Test func stoppingTheConsumerRemovesTheMatchRule() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let before = try #require(try await fixture.matchRuleCount(of: fixture.client))
        let stream = try await fixture.client.signals(matching: MatchRule(interface: "org.example.Tick"))
        #expect(try await fixture.matchRuleCount(of: fixture.client) == before + 1)
        for tick: UInt32 in 1...3 {
            try fixture.server.emitSignal(path: "/t", interface: "org.example.Tick", member: "Tick", arguments: [.uint32(tick)])
        }
        var seen: [UInt32] = []
        for await signal in stream {
            seen.append(signal.arguments.first?.uint32 ?? 0)
            if seen.last == 3 { break }  // the consumer stops here; `stream` itself stays in scope
        }
        #expect(seen == [1, 2, 3])
        // RemoveMatch went out on the client's loop before this call: the bus has processed it.
        #expect(try await fixture.settledMatchRuleCount(of: fixture.client) == before)
    }

    @Test func finishAndCancellationEndStreams() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let before = try #require(try await fixture.matchRuleCount(of: fixture.client))
        let a = try await fixture.client.signals(matching: MatchRule(interface: "org.example.A"))
        let b = try await fixture.client.signals(matching: MatchRule(interface: "org.example.A"))  // identical rule
        #expect(try await fixture.matchRuleCount(of: fixture.client) == before + 2)
        a.finish()
        var ended = 0
        for await _ in a { ended += 1 }
        #expect(ended == 0)
        let waiter = Task { for await _ in b {} }
        waiter.cancel()
        await waiter.value
        #expect(try await fixture.settledMatchRuleCount(of: fixture.client) == before)
    }

    @Test func invalidRuleIsRejectedWithTheBusError() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let error = await #expect(throws: DBusError.self) {
            _ = try await fixture.client.signals(matching: MatchRule(interface: "not an interface"))
        }
        #expect(error?.name == "org.freedesktop.DBus.Error.MatchRuleInvalid")
    }

    @Test func signalsArriveInOrder() async throws {
        let fixture = try await BusFixture.start()
        defer { fixture.stop() }
        let stream = try await fixture.client.signals(matching: MatchRule(sender: fixture.server.uniqueName, member: "N"))
        for n in 0..<500 {
            try fixture.server.emitSignal(path: "/n", interface: "org.example.N", member: "N", arguments: [.int32(Int32(n))])
        }
        var expected: Int32 = 0
        for await signal in stream {
            #expect(signal.arguments == [.int32(expected)])
            expected += 1
            if expected == 500 { break }
        }
        #expect(expected == 500)
    }
}


extension DBusConnection {
    /// Asks the bus for `name` (without queueing). Returns when we are its primary owner;
    /// throws when another connection owns it.
    fileprivate func requestName(_ name: String) async throws {
        try Names.checkBusName(name)
        let doNotQueue: UInt32 = 4
        let reply = try await callBus("RequestName", [.string(name), .uint32(doNotQueue)])
        switch reply.first?.uint32 {
        case 1, 4:  // primary owner, already owner
            return
        default:
            throw DBusError(name: DBusError.failedName, message: "the bus name \(name) is owned by another connection")
        }
    }
}
