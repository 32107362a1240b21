import BlueZ
import DBus
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import TestSupport

/// The peripheral engine against BlueZoo: a private bus, two mock adapters (hci0 for our
/// peripheral, hci1 for a scripted central built on the BlueZ layer).
///
/// BlueZoo forwards a central's StartNotify to our AcquireNotify when we offer it (with the
/// device and MTU in the options) and reads the socket, so both the socket path and the
/// PropertiesChanged fallback run here. What BlueZoo does not model: back-pressure from a
/// radio, and hanging up the notify socket on disconnect (the engine watches Device1.Connected
/// for that).
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(2)))
struct PeripheralBlueZooTests {
    static let localName = "bletransfer-test"

    /// Our peripheral on hci0 of `bus`, serving `payload` `count` times.
    struct Running {
        let session: BluetoothSession
        let peripheral: Peripheral
        let source: RepeatingMessageSource
        let events: PeripheralEventLog
        let task: Task<Int, any Error>

        static func start(on bus: BlueZooBus, payload: [UInt8], count: Int? = 1,
                          acquireNotify: Bool = true) async throws -> Running {
            let session = try await bus.openSession()
            let configuration = PeripheralConfiguration(
                adapterName: "hci0", localName: PeripheralBlueZooTests.localName, offersAcquireNotify: acquireNotify,
                fallbackValueInterval: .zero)
            let peripheral = Peripheral(configuration: configuration, session: session)
            let source = RepeatingMessageSource(message: OutgoingMessage(payload: payload), count: count)
            let events = PeripheralEventLog(following: peripheral.events)
            let task = Task { try await peripheral.run(source: source) }
            return Running(session: session, peripheral: peripheral, source: source, events: events, task: task)
        }

        func finish() async throws -> (delivered: Int, events: [RoleEvent]) {
            let delivered = try await task.value
            let all = await events.allWhenFinished()
            session.close()
            return (delivered, all)
        }
    }

    @Test("advertises the service and local name, registered on hci0, visible from hci1; compat delivery",
          arguments: [true, false])
    func compatDelivery(acquireNotify: Bool) async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let payload = CentralTestData.text + CentralTestData.binary(4000)
        let running = try await Running.start(on: bus, payload: payload, acquireNotify: acquireNotify)

        let central = try await ScriptedCentral.connect(on: bus)
        #expect(central.device.properties?.name == Self.localName)
        #expect(central.device.properties?.uuids.contains(TransferUUIDs.appleSampleService.canonical) == true)
        let (values, message) = try await central.receive()
        let (delivered, events) = try await running.finish()
        await central.close()

        #expect(message?.payload == payload)
        #expect(message?.format == .compat)
        #expect(values.last == WireFormat.endOfMessage)
        #expect(delivered == 1)
        let summaries = events.compactMap { if case .delivered(let summary, _) = $0 { summary } else { nil } }
        #expect(summaries.map(\.format) == [.compat])
        #expect(summaries.first?.byteCount == payload.count)
        #expect(events.contains { if case .advertising(let adapter, let name) = $0 { adapter == "hci0" && name == Self.localName } else { false } })
        #expect(events.contains { if case .stateChanged(_, .poweredOn, _) = $0 { true } else { false } })
        if acquireNotify {
            // BlueZoo reports MTU 512 with AcquireNotify: values use it, not 20 bytes.
            #expect(values.dropLast().contains { $0.count > 20 })
        } else {
            // StartNotify carries no MTU, and this central wrote nothing: 20-byte values.
            #expect(values.allSatisfy { $0.count <= 20 })
        }
    }

    @Test("a central offering the retired framed version 1 gets one line and no value; the next central gets the message")
    func version1CentralIsRefused() async throws {
        let bus = try await BlueZooBus.start(adapters: 3)
        defer { bus.stop() }
        let payload = CentralTestData.binary(3000)
        let running = try await Running.start(on: bus, payload: payload)

        let retired = try await ScriptedCentral.connect(on: bus)
        try await retired.writeRetiredHello()
        let updates = retired.characteristic.valueUpdates()
        try await retired.characteristic.startNotify()
        #expect(await running.events.waitFor(within: .seconds(20)) {
            if case .centralDropped(_, let reason) = $0 { reason == SenderConnection.version1Refusal } else { false }
        })
        await retired.close()
        _ = updates

        // Never served, so advertising never paused: the next central finds the sender as it was.
        let next = try await ScriptedCentral.connect(on: bus, adapterIndex: 2)
        let (_, message) = try await next.receive()
        let (delivered, events) = try await running.finish()
        await next.close()

        #expect(message?.payload == payload)
        #expect(delivered == 1)
        // The version-1 central was never served: the only subscription is Apple's flow.
        #expect(events.compactMap(\.subscribedFormat) == [.compat])
    }

    // BlueZoo cannot connect the same adapter pair twice (it exports the linked GATT objects
    // again and fails with EEXIST), so every further central uses an adapter of its own.

    @Test("unsubscribing mid-transfer counts nothing; the next subscriber gets the message from byte 0")
    func earlyUnsubscribeIsNotCounted() async throws {
        let bus = try await BlueZooBus.start(adapters: 3)
        defer { bus.stop() }
        let payload = CentralTestData.binary(200_000)
        let running = try await Running.start(on: bus, payload: payload)

        let first = try await ScriptedCentral.connect(on: bus)
        let (early, earlyMessage) = try await first.receive(leaveAfter: 5)
        #expect(earlyMessage == nil)
        #expect(early.count == 5)
        await first.disconnect()

        #expect(await running.events.waitFor(count: 2) { $0.isAdvertising })
        let second = try await ScriptedCentral.connect(on: bus, adapterIndex: 2)
        let (_, message) = try await second.receive()
        let (delivered, events) = try await running.finish()
        await second.close()
        first.session.close()

        #expect(message?.payload == payload)
        #expect(delivered == 1)
        #expect(events.filter(\.isAborted).count == 1)
        #expect(events.filter { if case .delivered = $0 { true } else { false } }.count == 1)
        #expect(await running.source.deliveredCount == 1)
    }

    @Test("hostile writes (garbage, oversized, a retired version-1 ACK) are ignored; the message still counts once")
    func hostileWritesAreIgnored() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let payload = Array("the real message".utf8)
        let running = try await Running.start(on: bus, payload: payload, count: 1)

        let central = try await ScriptedCentral.connect(on: bus)
        try await central.write([0xFF, 0x00, 0x42])
        try await central.write([UInt8](repeating: 0x89, count: 512))
        // What a retired version-1 central would write as its ACK of this message.
        try await central.write([0x89, 0x42, 0x4C, 0x54, 0x41, 1, 0, 0, 0, 0, 0, 0, 0, 7] + sha256(payload).prefix(6))
        #expect(await running.source.deliveredCount == 0)
        let (_, message) = try await central.receive()
        let (delivered, _) = try await running.finish()
        await central.close()
        #expect(message?.payload == payload)
        #expect(delivered == 1)
    }

    @Test("two messages in a row (--count 2): each subscriber gets the message from byte 0")
    func countTwo() async throws {
        let bus = try await BlueZooBus.start(adapters: 3)
        defer { bus.stop() }
        let payload = CentralTestData.text
        let running = try await Running.start(on: bus, payload: payload, count: 2)
        for index in 1...2 {
            #expect(await running.events.waitFor(count: index) { $0.isAdvertising })
            let central = try await ScriptedCentral.connect(on: bus, adapterIndex: index)
            let (_, message) = try await central.receive()
            #expect(message?.payload == payload)
            await central.close()
        }
        let (delivered, events) = try await running.finish()
        #expect(delivered == 2)
        let sequences = events.compactMap { if case .delivered(let summary, _) = $0 { summary.sequence } else { nil } }
        #expect(sequences == [1, 2])
    }

    @Test("cancelling the run (SIGINT/SIGTERM path) unregisters the application and the advertisement")
    func cancellationLeavesNothingRegistered() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let observer = try await bus.openSession()
        defer { observer.close() }
        let probe = RegistrationProbe(observer: observer)

        let running = try await Running.start(on: bus, payload: Array("bye".utf8), count: nil)
        await probe.wait(until: (true, 1))
        #expect(probe.registered() == (true, 1))

        running.task.cancel()
        await #expect(throws: CancellationError.self) { try await running.task.value }
        // Our session is still open: only our own unregistration can have removed them.
        await probe.wait(until: (false, 0))
        #expect(probe.registered() == (false, 0))
        running.session.close()
    }

    @Test("powering the adapter off mid-run tears down; powering it on resumes serving")
    func powerCycleResumes() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let payload = CentralTestData.binary(500)
        let running = try await Running.start(on: bus, payload: payload)
        let admin = try await bus.openSession()
        defer { admin.close() }
        let adapter = try admin.adapter(named: "hci0")

        // Let it come up, then switch the adapter off and, once the peripheral saw that, on.
        #expect(await running.events.waitFor { $0.isAdvertising })
        try await adapter.setPowered(false)
        #expect(await running.events.waitFor { if case .stateChanged(_, .poweredOff, _) = $0 { true } else { false } })
        try await adapter.setPowered(true)
        // Connect only once the application is registered again (BlueZoo links a central to
        // the applications registered when it connects).
        #expect(await running.events.waitFor(count: 2) { $0.isAdvertising })

        let central = try await ScriptedCentral.connect(on: bus)
        let (_, message) = try await central.receive()
        let (delivered, events) = try await running.finish()
        await central.close()

        #expect(message?.payload == payload)
        #expect(delivered == 1)
        let states = events.compactMap { if case .stateChanged(_, let to, _) = $0 { to } else { nil } }
        #expect(states.contains(.poweredOff))
        #expect(states.last == .poweredOn)
        #expect(events.filter { if case .advertising = $0 { true } else { false } }.count >= 2)
    }
}

