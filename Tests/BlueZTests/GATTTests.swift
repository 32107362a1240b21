import BluetoothModel
import BlueZ
import DBus
import Synchronization
import Testing
import TestSupport

/// The transfer service of Apple's sample; these tests only need some 128-bit UUIDs.
private let serviceUUID = "E20A39F4-73F5-4BC4-A12F-17D1AD07A961"
private let characteristicUUID = "08590F7E-DB05-467E-8757-72F6FAEB13D4"
private let serviceUUIDLower = "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"

/// A read-only characteristic beside the test's one, whose reads return a fixed value.
private let fixedValueUUID = "4C7B3B1E-2F66-4E0C-9A43-8E7C5B6F4D21"
private let fixedValue: [UInt8] = [0x81, 0x00]

/// What the peripheral side's events were, delivered to the test as streams.
private struct PeripheralProbe: Sendable {
    let writes: AsyncStream<([UInt8], GATTRequestOptions)>
    let writeSink: AsyncStream<([UInt8], GATTRequestOptions)>.Continuation
    let notifyStarts: AsyncStream<Void>
    let notifyStartSink: AsyncStream<Void>.Continuation
    let subscriptions: AsyncStream<NotifySubscription>
    let subscriptionSink: AsyncStream<NotifySubscription>.Continuation
    /// The characteristic indices of `notifyReleased` events.
    let releases: AsyncStream<Int>
    let releaseSink: AsyncStream<Int>.Continuation

    init() {
        (writes, writeSink) = AsyncStream.makeStream()
        (notifyStarts, notifyStartSink) = AsyncStream.makeStream()
        (subscriptions, subscriptionSink) = AsyncStream.makeStream()
        (releases, releaseSink) = AsyncStream.makeStream()
    }

    /// Answers reads with `readValue` and writes once recorded, until cancelled.
    func serve(_ events: AsyncStream<LocalGATTEvent>, readValue: [UInt8]) async {
        for await event in events {
            switch event {
            case .read(_, _, let reply): reply.succeed(readValue)
            case .write(_, let value, let options, let reply):
                writeSink.yield((value, options))
                reply.succeed()
            case .notifyStarted: notifyStartSink.yield(())
            case .notifyAcquired(_, let subscription): subscriptionSink.yield(subscription)
            case .notifyReleased(let index): releaseSink.yield(index)
            case .notifyStopped, .confirmed: break
            }
        }
    }
}

/// Peripheral on hci1 (its own session, as another process would have), central on hci0.
private struct Pair {
    let central: BluetoothSession
    let peripheral: BluetoothSession
    let application: LocalGATTApplication
    let advertisement: LEAdvertisement
    let probe: PeripheralProbe
    /// The private bus, for a test that connects a client of its own.
    let busAddress: String
}

/// The test's service: the read/write/notify characteristic (reads by request), and the
/// fixed-value one.
private func testService(acquire: Bool) -> LocalGATTService {
    LocalGATTService(uuid: serviceUUID, characteristics: [
        LocalGATTCharacteristic(uuid: characteristicUUID, flags: [.read, .write, .writeWithoutResponse, .notify],
                                readsByRequest: true, offersAcquireNotify: acquire),
        LocalGATTCharacteristic(uuid: fixedValueUUID, flags: [.read], value: fixedValue),
    ])
}

/// A session of the peripheral's own on the BlueZoo bus, once it sees hci1.
private func withPeripheralSession(_ body: (_ zoo: BlueZoo, _ central: BluetoothSession, _ peripheral: BluetoothSession,
                                            _ hci1: Adapter) async throws -> Void) async throws {
    try await withBlueZoo { zoo, central in
        let peripheral = try await BluetoothSession.open(address: zoo.bus.address)
        defer { peripheral.close() }
        try await peripheral.waitUntil("the peripheral session sees hci1") { $0.adapters().count == 2 }
        try await body(zoo, central, peripheral, try peripheral.adapter(named: "hci1"))
    }
}

/// Registers an application and an advertisement on hci1 for `body`; the probe serves the
/// application's events.
private func withPeripheral(acquire: Bool, _ body: (Pair) async throws -> Void) async throws {
    try await withPeripheralSession { zoo, central, peripheral, hci1 in
        let probe = PeripheralProbe()
        let application = LocalGATTApplication(session: peripheral, service: testService(acquire: acquire))
        let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
            serviceUUIDs: [serviceUUID], localName: "bletransfer-test", includeTxPower: true))
        try await application.withRegistration(on: hci1) {
            try await advertisement.withRegistration(on: hci1) {
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { await probe.serve(application.events, readValue: Array("hello".utf8)) }
                    defer { group.cancelAll() }
                    try await body(Pair(central: central, peripheral: peripheral, application: application,
                                        advertisement: advertisement, probe: probe, busAddress: zoo.bus.address))
                }
            }
        }
    }
}

/// Discovers the peripheral from hci0, connects, waits for service resolution.
private func connectToPeripheral(_ pair: Pair) async throws -> (Device, RemoteGATTCharacteristic) {
    let hci0 = try pair.central.adapter(named: "hci0")
    let sightings = hci0.sightings(serviceUUID: serviceUUID)
    try await hci0.setDiscoveryFilter(uuids: [serviceUUID], transport: .le)
    try await hci0.startDiscovery()
    let sighting = try await first(sightings)
    try await hci0.stopDiscovery()
    let device = sighting.device
    try await device.connect()
    try await device.waitUntilServicesResolved()
    let characteristic = try device.characteristic(service: serviceUUID, characteristic: characteristicUUID.lowercased())
    return (device, characteristic)
}

@Suite("GATT between two BlueZoo adapters: advertising, discovery, connection, read/write/notify",
       .enabled(if: TestTools.haveBlueZoo, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .serialized)
struct GATTTests {
    @Test("registration shows on the adapter: advertising instance taken, service UUID listed")
    func registration() async throws {
        try await withPeripheral(acquire: false) { pair in
            let hci1 = try pair.peripheral.adapter(named: "hci1")
            try await pair.peripheral.waitUntil("the advertisement is active") { _ in
                hci1.properties?.advertising?.activeInstances == 1
            }
            try await pair.peripheral.waitUntil("the service UUID is on the adapter") { _ in
                hci1.properties?.uuids.contains(serviceUUIDLower) == true
            }
            #expect(pair.application.registeredAdapter == hci1.path)
            #expect(pair.advertisement.isRegistered)
        }
    }

    @Test("our exported objects answer only org.bluez's owner: another client's Release is refused")
    func callsFromOtherClientsAreRefused() async throws {
        try await withPeripheral(acquire: false) { pair in
            let intruder = try await DBusConnection.connect(address: pair.busAddress)
            defer { intruder.close() }
            let target = pair.peripheral.connection.uniqueName
            for (path, interface, method) in [
                (pair.advertisement.path, "org.bluez.LEAdvertisement1", "Release"),
                (pair.application.root, "org.freedesktop.DBus.ObjectManager", "GetManagedObjects"),
            ] {
                do {
                    _ = try await intruder.call(destination: target, path: path, interface: interface, method: method)
                    Issue.record("\(interface).\(method) from another client was answered")
                } catch let error as DBusError {
                    #expect(error.isAccessDenied, "\(error)")
                }
            }
            // Peer.Ping stays open to anyone (it tells nothing and changes nothing).
            _ = try await intruder.call(destination: target, path: .root, interface: "org.freedesktop.DBus.Peer", method: "Ping")
            #expect(pair.advertisement.isRegistered)
        }
    }

    @Test("the central discovers the advertisement, connects and resolves the service")
    func discoverAndConnect() async throws {
        try await withPeripheral(acquire: false) { pair in
            let (device, characteristic) = try await connectToPeripheral(pair)
            let properties = try #require(device.properties)
            #expect(properties.address.description == TestAddress.hci1)
            #expect(properties.name == "bletransfer-test")
            #expect(properties.uuids.contains(serviceUUIDLower))
            #expect(properties.connected && properties.servicesResolved)
            #expect(device.service(uuid: serviceUUID)?.isPrimary == true)
            #expect(Set(characteristic.flags) == [.read, .write, .writeWithoutResponse, .notify])
            #expect(BluetoothUUID.matches(characteristic.uuid, characteristicUUID))
            #expect(characteristic.mtu != nil)
            // A device BlueZ already knows is reported again on the next look, without discovery.
            let again = try await first(try pair.central.adapter(named: "hci0").sightings(serviceUUID: serviceUUID))
            #expect(again.kind == .alreadyKnown && again.device == device)

            try await device.disconnect()
            try await device.waitUntilDisconnected()
            #expect(device.properties?.connected == false)
            await #expect(throws: BluetoothError.self) { try await device.waitUntilServicesResolved() }
        }
    }

    @Test("removing a discovered device drops it from BlueZ's tree")
    func removeDevice() async throws {
        try await withPeripheral(acquire: false) { pair in
            let hci0 = try pair.central.adapter(named: "hci0")
            let sightings = hci0.sightings(serviceUUID: serviceUUID)
            try await hci0.startDiscovery()
            let device = try await first(sightings).device
            try await hci0.stopDiscovery()
            #expect(hci0.devices().contains(device))
            try await hci0.removeDevice(device)
            try await pair.central.waitUntil("the device is gone") { _ in !device.exists }
            #expect(hci0.device(address: try #require(BluetoothAddress(TestAddress.hci1))) == nil)
        }
    }

    @Test("read and write reach the local characteristic with BlueZ's options")
    func readAndWrite() async throws {
        try await withPeripheral(acquire: false) { pair in
            let (_, characteristic) = try await connectToPeripheral(pair)
            #expect(try await characteristic.readValue() == Array("hello".utf8))

            try await characteristic.writeValue([1, 2, 3], type: .command)
            let (value, options) = try await first(pair.probe.writes)
            #expect(value == [1, 2, 3])
            #expect(options.writeType == "command")
            #expect(options.device?.description == "/org/bluez/hci1/dev_00_11_22_33_44_01")
            #expect(options.link == "LE")

            try await characteristic.writeValue([4], type: .request)
            let (second, secondOptions) = try await first(pair.probe.writes)
            #expect(second == [4] && secondOptions.writeType == "request")
        }
    }

    @Test("notifications through StartNotify and PropertiesChanged on Value (fallback path)")
    func notifyFallback() async throws {
        try await withPeripheral(acquire: false) { pair in
            let (_, characteristic) = try await connectToPeripheral(pair)
            let updates = characteristic.valueUpdates()
            try await characteristic.startNotify()
            _ = try await first(pair.probe.notifyStarts)
            #expect(pair.application.isNotifying())
            try pair.application.notify([0xAA, 0xBB])
            try pair.application.notify(Array("EOM".utf8))
            let received = try await collect(updates) { $0.count == 2 }
            #expect(received == [[0xAA, 0xBB], Array("EOM".utf8)])
            try await characteristic.stopNotify()
        }
    }

    @Test("AcquireNotify on our characteristic: BlueZ reads our socket, one packet per notification")
    func acquireNotifyPeripheralSide() async throws {
        try await withPeripheral(acquire: true) { pair in
            let (_, characteristic) = try await connectToPeripheral(pair)
            let updates = characteristic.valueUpdates()
            try await characteristic.startNotify()
            let subscription = try await first(pair.probe.subscriptions)
            #expect(subscription.options.device?.description == "/org/bluez/hci1/dev_00_11_22_33_44_01")
            #expect(subscription.mtu == subscription.options.mtu)
            #expect(pair.application.isNotifyAcquired())

            let values: [[UInt8]] = [Array(repeating: 1, count: subscription.socket.maximumValueLength), [2, 2], Array("EOM".utf8)]
            for value in values { try await subscription.socket.send(value) }
            let received = try await collect(updates) { $0.count == values.count }
            #expect(received == values)
            try await characteristic.stopNotify()

            // Real BlueZ closes its end on unsubscribe (our socket then hangs up); BlueZoo
            // keeps a duplicate of the descriptor open, so here we let go from our side, which
            // must clear NotifyAcquired all the same.
            subscription.socket.close()
            #expect(try await first(pair.probe.releases) == 0)
            #expect(!pair.application.isNotifyAcquired())
        }
    }

    @Test("AcquireNotify from the central: values arrive on a socket, one packet per notification")
    func acquireNotifyCentralSide() async throws {
        try await withPeripheral(acquire: true) { pair in
            let (_, characteristic) = try await connectToPeripheral(pair)
            let socket = try await characteristic.acquireNotify()
            defer { socket.close() }
            let subscription = try await first(pair.probe.subscriptions)
            let values: [[UInt8]] = [[1, 2, 3], Array(repeating: 7, count: subscription.socket.maximumValueLength), Array("EOM".utf8)]
            for value in values { try await subscription.socket.send(value) }
            var received: [[UInt8]] = []
            for _ in values {
                received.append(try #require(try await socket.receive()))
            }
            #expect(received == values)
            socket.close()
        }
    }

    @Test("unregistering the advertisement frees the instance; the application can be re-registered")
    func teardown() async throws {
        try await withPeripheral(acquire: false) { pair in
            let hci1 = try pair.peripheral.adapter(named: "hci1")
            await pair.advertisement.unregister()
            try await pair.peripheral.waitUntil("no active advertisement") { _ in
                hci1.properties?.advertising?.activeInstances == 0
            }
            #expect(!pair.advertisement.isRegistered)
            await pair.application.unregister()
            try await pair.peripheral.waitUntil("the service UUID left the adapter") { _ in
                hci1.properties?.uuids.contains(serviceUUIDLower) == false
            }
            try await pair.application.register(on: hci1)
            try await pair.peripheral.waitUntil("the service UUID is back") { _ in
                hci1.properties?.uuids.contains(serviceUUIDLower) == true
            }
        }
    }

    @Test("a characteristic with a fixed value answers reads itself and refuses writes")
    func fixedValueCharacteristic() async throws {
        try await withPeripheral(acquire: false) { pair in
            let (device, _) = try await connectToPeripheral(pair)
            let fixed = try device.characteristic(service: serviceUUID, characteristic: fixedValueUUID.lowercased())
            #expect(try await fixed.readValue() == fixedValue)
            await #expect(throws: BluetoothError.self) { try await fixed.writeValue([1], type: .request) }
        }
    }

    @Test("writes reach the event sequence in the order the central sent them")
    func writesInOrder() async throws {
        try await withPeripheral(acquire: false) { pair in
            let (_, characteristic) = try await connectToPeripheral(pair)
            let sent = (0..<40).map { [UInt8($0)] }
            for value in sent {
                try await characteristic.writeValue(value, type: .command)
            }
            let received = try await collect(pair.probe.writes) { $0.count == sent.count }
            #expect(received.map(\.0) == sent)
        }
    }
}

/// How a test leaves a registration scope.
enum ScopeExit: String, CaseIterable, Sendable, CustomStringConvertible {
    case returning, throwing, cancelled
    var description: String { rawValue }
}

private struct LeavingTheScope: Error {}

/// Whether the consumer holds the written value (set before it answers the write).
private final class WriteHeld: Sendable {
    let value = Mutex(false)
}

@Suite("Registration scopes and the event sequence's replies, on BlueZoo",
       .enabled(if: TestTools.haveBlueZoo, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .serialized)
struct LocalGATTScopeTests {
    @Test("leaving the scopes unregisters the advertisement and the application", arguments: ScopeExit.allCases)
    func leavingUnregisters(exit: ScopeExit) async throws {
        try await withPeripheralSession { _, _, peripheral, hci1 in
            let application = LocalGATTApplication(session: peripheral, service: testService(acquire: false))
            let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
                serviceUUIDs: [serviceUUID], localName: "bletransfer-test"))
            let (entered, enteredSink) = AsyncStream<Void>.makeStream()
            let scopes = Task {
                try await application.withRegistration(on: hci1) {
                    try await advertisement.withRegistration(on: hci1) {
                        try await peripheral.waitUntil("both are registered") { _ in
                            hci1.properties?.advertising?.activeInstances == 1
                                && hci1.properties?.uuids.contains(serviceUUIDLower) == true
                        }
                        enteredSink.yield()
                        switch exit {
                        case .returning: return
                        case .throwing: throw LeavingTheScope()
                        case .cancelled: try await Task.sleep(for: .seconds(60))
                        }
                    }
                }
            }
            _ = try await first(entered)
            if exit == .cancelled { scopes.cancel() }
            let result = await scopes.result
            switch exit {
            case .returning: #expect(throws: Never.self) { try result.get() }
            case .throwing: #expect(throws: LeavingTheScope.self) { try result.get() }
            case .cancelled: #expect(throws: CancellationError.self) { try result.get() }
            }
            #expect(application.registeredAdapter == nil)
            #expect(!advertisement.isRegistered)
            // bluetoothd (BlueZoo) was told, after a cancellation too.
            try await peripheral.waitUntil("neither is registered any more") { _ in
                hci1.properties?.advertising?.activeInstances == 0
                    && hci1.properties?.uuids.contains(serviceUUIDLower) == false
            }
        }
    }

    @Test("the advertising control starts and pauses; the scope's end unregisters")
    func advertisingControl() async throws {
        try await withPeripheralSession { _, _, peripheral, hci1 in
            let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
                serviceUUIDs: [serviceUUID]))
            func active(_ count: Int) async throws {
                try await peripheral.waitUntil("\(count) active advertisement(s)") { _ in
                    hci1.properties?.advertising?.activeInstances == count
                }
            }
            let control = try await advertisement.withControl(on: hci1) { control in
                #expect(!control.isAdvertising)
                try await control.start()
                try await active(1)
                await control.pause()
                try await active(0)
                #expect(!control.isAdvertising)
                try await control.start()
                try await active(1)
                return control
            }
            try await active(0)
            #expect(!advertisement.isRegistered)
            await #expect(throws: CancellationError.self) { try await control.start() }
        }
    }

    @Test("a write request is answered when the consumer answers; dropped or unserved, with an error")
    func writeReplies() async throws {
        try await withPeripheralSession { _, central, peripheral, hci1 in
            let application = LocalGATTApplication(session: peripheral, service: testService(acquire: false))
            let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
                serviceUUIDs: [serviceUUID], localName: "bletransfer-test"))
            let held = WriteHeld()
            try await application.withRegistration(on: hci1) {
                try await advertisement.withRegistration(on: hci1) {
                    let consumer = Task {
                        for await event in application.events {
                            guard case .write(_, let value, _, let reply) = event else { continue }
                            if value == [0xDD] { continue }  // dropped unanswered
                            // Answered late: the central's write must not return before.
                            try? await Task.sleep(for: .milliseconds(300))
                            held.value.withLock { $0 = true }
                            reply.succeed()
                        }
                    }
                    let pair = Pair(central: central, peripheral: peripheral, application: application,
                                    advertisement: advertisement, probe: PeripheralProbe(), busAddress: "")
                    let (_, characteristic) = try await connectToPeripheral(pair)

                    try await characteristic.writeValue([1], type: .request)
                    #expect(held.value.withLock { $0 })

                    let dropped = ContinuousClock.now
                    await #expect(throws: BluetoothError.self) { try await characteristic.writeValue([0xDD], type: .request) }
                    #expect(ContinuousClock.now - dropped < .seconds(5))

                    // The consumer gone, the sequence is finished: requests fail at once.
                    consumer.cancel()
                    await consumer.value
                    let unserved = ContinuousClock.now
                    await #expect(throws: BluetoothError.self) { try await characteristic.writeValue([2], type: .request) }
                    #expect(ContinuousClock.now - unserved < .seconds(5))
                }
            }
        }
    }

    @Test("a request held unanswered is answered with an error once the reply limit passes")
    func heldRequestTimesOut() async throws {
        try await withPeripheralSession { _, central, peripheral, hci1 in
            let application = LocalGATTApplication(session: peripheral, service: testService(acquire: false), root: nil,
                                                   replyLimit: .milliseconds(500))
            let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
                serviceUUIDs: [serviceUUID], localName: "bletransfer-test"))
            try await application.withRegistration(on: hci1) {
                try await advertisement.withRegistration(on: hci1) {
                    let (held, heldSink) = AsyncStream<GATTReply<Void>>.makeStream()
                    let consumer = Task {
                        for await event in application.events {
                            if case .write(_, _, _, let reply) = event { heldSink.yield(reply) }
                        }
                    }
                    defer { consumer.cancel() }
                    let pair = Pair(central: central, peripheral: peripheral, application: application,
                                    advertisement: advertisement, probe: PeripheralProbe(), busAddress: "")
                    let (_, characteristic) = try await connectToPeripheral(pair)
                    let started = ContinuousClock.now
                    await #expect(throws: BluetoothError.self) { try await characteristic.writeValue([1], type: .request) }
                    #expect(ContinuousClock.now - started < .seconds(10))
                    // Still held by the test, and answered all the same.
                    let reply = try await first(held)
                    #expect(reply.isAnswered)
                }
            }
        }
    }
}
