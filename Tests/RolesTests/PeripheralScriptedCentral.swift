import BlueZ
import DBus
import Foundation
import Transfer
import TestSupport

/// A minimal central for the peripheral's bus tests, built straight on the BlueZ layer (not on
/// our Central engine, so the peripheral is tested against an independent receiver). It
/// follows Apple's central flow — scan for the service, connect, subscribe, append values
/// until `EOM`, unsubscribe — and can deviate on purpose (leave early, write HELLO/ACK or
/// garbage).
final class ScriptedCentral: Sendable {
    let session: BluetoothSession
    let adapter: Adapter
    let device: Device
    let characteristic: RemoteGATTCharacteristic

    enum Failure: Error, CustomStringConvertible {
        case notFound(String)
        case streamEnded(values: Int)
        var description: String {
            switch self {
            case .notFound(let what): "not found: \(what)"
            case .streamEnded(let values): "notifications stopped after \(values) values, before EOM"
            }
        }
    }

    private init(session: BluetoothSession, adapter: Adapter, device: Device, characteristic: RemoteGATTCharacteristic) {
        self.session = session
        self.adapter = adapter
        self.device = device
        self.characteristic = characteristic
    }

    /// Scans on adapter `adapterIndex` for a device advertising `serviceUUID`, connects and
    /// resolves the transfer characteristic.
    static func connect(on bus: BlueZooBus, adapterIndex: Int = 1,
                        serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService,
                        characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic) async throws -> ScriptedCentral {
        let session = try await bus.openSession()
        let adapter = try session.adapter(named: "hci\(adapterIndex)")
        let device = try await discover(serviceUUID, on: adapter)
        try await device.connect()
        try await device.waitUntilServicesResolved()
        let characteristic = try device.characteristic(service: serviceUUID.canonical, characteristic: characteristicUUID.canonical)
        return ScriptedCentral(session: session, adapter: adapter, device: device, characteristic: characteristic)
    }

    /// The first device advertising `serviceUUID` that discovery reports.
    static func discover(_ serviceUUID: BluetoothUUID, on adapter: Adapter) async throws -> Device {
        let sightings = adapter.sightings(serviceUUID: serviceUUID.canonical)
        try await adapter.setDiscoveryFilter(uuids: [serviceUUID.canonical])
        try await adapter.startDiscovery()
        defer { Task { try? await adapter.stopDiscovery() } }
        for await sighting in sightings {
            return sighting.device
        }
        throw Failure.notFound("a device advertising \(serviceUUID)")
    }

    /// Writes a HELLO of the retired framed version 1 (write without response), as an old
    /// build of bletransfer would.
    func writeRetiredHello() async throws {
        try await characteristic.writeValue([0x89, 0x42, 0x4C, 0x54, 0x48, 1, 0, 0, 0, 0, 0, 0, 0, 9], type: .command)
    }

    func write(_ value: [UInt8]) async throws {
        try await characteristic.writeValue(value, type: .command)
    }

    /// Subscribes (StartNotify) and reads values until `EOM` — or, with `leaveAfter`, until
    /// that many values arrived — then, like Apple's central, unsubscribes (StopNotify) and
    /// disconnects. Returns the values and the message the receiver assembled from them (nil
    /// when it left early). BlueZoo does not hang up an AcquireNotify socket on StopNotify (it
    /// keeps a duplicate of the descriptor), so there the disconnection is what the peripheral
    /// sees; real BlueZ hangs up on both.
    func receive(leaveAfter: Int? = nil, unsubscribe: Bool = true) async throws
        -> (values: [[UInt8]], message: ReceivedMessage?) {
        let updates = characteristic.valueUpdates()
        try await characteristic.startNotify()
        var receiver = MessageReceiver()
        var values: [[UInt8]] = []
        var message: ReceivedMessage?
        for await value in updates {
            values.append(value)
            if case .complete(let complete) = try receiver.receive(value) {
                message = complete
                break
            }
            if let leaveAfter, values.count >= leaveAfter { break }
        }
        if message == nil && leaveAfter == nil { throw Failure.streamEnded(values: values.count) }
        if unsubscribe {
            try await characteristic.stopNotify()
            await disconnect()
        }
        return (values, message)
    }

    func unsubscribe() async throws {
        try await characteristic.stopNotify()
    }

    func disconnect() async {
        try? await device.disconnect()
    }

    func close() async {
        await disconnect()
        session.close()
    }
}
