import BluetoothModel
import BlueZ
import DBus
import Testing
import TestSupport

/// The transfer service of Apple's sample; these tests only need some 128-bit UUIDs.
private let serviceUUID = "E20A39F4-73F5-4BC4-A12F-17D1AD07A961"
private let characteristicUUID = "08590F7E-DB05-467E-8757-72F6FAEB13D4"
private let serviceUUIDLower = "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"

/// What the peripheral side's handlers saw, delivered to the test as streams.
private struct PeripheralProbe: Sendable {
    let writes: AsyncStream<([UInt8], GATTRequestOptions)>
    let writeSink: AsyncStream<([UInt8], GATTRequestOptions)>.Continuation
    let notifyStarts: AsyncStream<Void>
    let notifyStartSink: AsyncStream<Void>.Continuation
    let subscriptions: AsyncStream<NotifySubscription>
    let subscriptionSink: AsyncStream<NotifySubscription>.Continuation

    init() {
        (writes, writeSink) = AsyncStream.makeStream()
        (notifyStarts, notifyStartSink) = AsyncStream.makeStream()
        (subscriptions, subscriptionSink) = AsyncStream.makeStream()
    }

    func handlers(readValue: [UInt8], acquire: Bool) -> LocalCharacteristicHandlers {
        let writeSink = self.writeSink
        let notifyStartSink = self.notifyStartSink
        let subscriptionSink = self.subscriptionSink
        let onAcquire: (@Sendable (NotifySubscription) async -> Void)? =
            acquire ? { @Sendable subscription in subscriptionSink.yield(subscription) } : nil
        return LocalCharacteristicHandlers(
            read: { _ in readValue },
            write: { value, options in writeSink.yield((value, options)) },
            startNotify: { notifyStartSink.yield(()) },
            acquireNotify: onAcquire
        )
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

private func withPeripheral(acquire: Bool, _ body: (Pair) async throws -> Void) async throws {
    try await withBlueZoo { zoo, central in
        let peripheral = try await BluetoothSession.open(address: zoo.bus.address)
        defer { peripheral.close() }
        try await peripheral.waitUntil("the peripheral session sees hci1") { $0.adapters().count == 2 }
        let probe = PeripheralProbe()
        let service = LocalGATTService(uuid: serviceUUID, characteristics: [
            LocalGATTCharacteristic(uuid: characteristicUUID,
                                    flags: [.read, .write, .writeWithoutResponse, .notify],
                                    handlers: probe.handlers(readValue: Array("hello".utf8), acquire: acquire)),
        ])
        let hci1 = try peripheral.adapter(named: "hci1")
        let application = LocalGATTApplication(session: peripheral, service: service)
        try await application.register(on: hci1)
        let advertisement = LEAdvertisement(session: peripheral, configuration: AdvertisementConfiguration(
            serviceUUIDs: [serviceUUID], localName: "bletransfer-test", includeTxPower: true))
        try await advertisement.register(on: hci1)
        try await body(Pair(central: central, peripheral: peripheral, application: application,
                            advertisement: advertisement, probe: probe, busAddress: zoo.bus.address))
        await advertisement.unregister()
        await application.unregister()
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
            let events = pair.application.events()
            try await characteristic.startNotify()
            let subscription = try await first(pair.probe.subscriptions)
            #expect(try await first(events) == .notifyAcquired(characteristic: 0, device: subscription.options.device))
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
            #expect(try await first(events) == .notifyReleased(characteristic: 0))
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
}
