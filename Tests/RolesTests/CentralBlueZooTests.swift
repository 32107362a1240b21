import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import TestSupport

/// The central against BlueZoo: a private bus, two mock adapters (hci0 for the central, hci1
/// for a scripted peripheral built on the BlueZ layer).
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(2)))
struct CentralBlueZooTests {
    /// What a central run against a scripted peripheral left behind.
    struct Outcome {
        /// The number of messages the run received, or why it failed.
        let result: Result<Int, any Error>
        /// Every event of the run.
        let events: [RoleEvent]
        /// What the peripheral saw.
        let peripheral: ScriptedPeripheral.Recorder

        var received: Int { get throws { try result.get() } }
    }

    /// Runs a central on hci0 of a fresh BlueZoo bus until it returns, against a scripted
    /// peripheral on hci1 that answers each subscription with the next delivery of `script`.
    func runCentral(
        _ configuration: CentralConfiguration = CentralTestData.configuration(),
        against script: [ScriptedPeripheral.Delivery], mechanism: ScriptedPeripheral.Mechanism = .socket,
        flags: [GATTCharacteristicFlag] = [.notify, .writeWithoutResponse], sink: any MessageSink = CollectingSink()
    ) async throws -> Outcome {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let peripheral = try await ScriptedPeripheral.start(on: bus, mechanism: mechanism, flags: flags, script: script)
        let session = try await bus.openSession()
        defer { session.close() }

        let central = Central(configuration: configuration, session: session)
        let events = EventRecorder(central.events)
        let result: Result<Int, any Error>
        do { result = .success(try await central.run(sink: sink)) } catch { result = .failure(error) }
        await peripheral.stop()
        return Outcome(result: result, events: await events.all(), peripheral: peripheral.recorder)
    }

    /// How a central with `configuration` fails on a fresh BlueZoo bus (`adapters` mock
    /// adapters, changed by `prepare`) where no peripheral offers the service.
    func centralFailure(
        _ configuration: CentralConfiguration = CentralTestData.configuration(), adapters: Int = 2,
        timeout: Duration? = nil, prepare: (BlueZooBus) async throws -> Void = { _ in },
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws -> RoleFailure? {
        let bus = try await BlueZooBus.start(adapters: adapters)
        defer { bus.stop() }
        try await prepare(bus)
        let session = try await bus.openSession()
        defer { session.close() }
        let central = Central(configuration: configuration, session: session)
        return await #expect(throws: RoleFailure.self, sourceLocation: sourceLocation) {
            try await central.run(sink: CollectingSink(), timeout: timeout)
        }
    }

    @Test("compat: 20-byte values then EOM, several messages in a row, rescanning after each",
          arguments: [ScriptedPeripheral.Mechanism.socket, .propertiesChanged])
    func compatSeveralMessages(mechanism: ScriptedPeripheral.Mechanism) async throws {
        let messages = [CentralTestData.text, CentralTestData.binary(333), Array("third".utf8)]
        let sink = CollectingSink()
        let run = try await runCentral(
            CentralTestData.configuration(count: 3, framed: false),
            against: messages.map { .compat($0, chunk: 20) }, mechanism: mechanism, sink: sink)

        #expect(try run.received == 3)
        #expect(sink.messages.map(\.payload) == messages)
        #expect(sink.messages.allSatisfy { $0.format == .compat })
        #expect(sink.messages[0].text == String(decoding: CentralTestData.text, as: UTF8.self))
        #expect(run.events.compactMap(\.receivedSummary).map(\.sequence) == [1, 2, 3])
        #expect(run.events.filter { if case .scanning = $0 { true } else { false } }.count >= 3)
        #expect(run.peripheral.hellos.isEmpty)
    }

    @Test("a sender answering in the retired framed version 1 is refused with one line; nothing of it is stored")
    func version1AnswerIsRefused() async throws {
        let payload = CentralTestData.binary(1000)
        let sink = CollectingSink()
        let run = try await runCentral(against: [.retiredVersion1(payload), .compat(payload)], sink: sink)

        _ = try run.received
        // Only the second visit's Apple-flow message was stored; the version-1 one got no ACK.
        #expect(sink.messages.map(\.format) == [.compat])
        #expect(run.peripheral.otherWrites.isEmpty)
        let refusals = run.events.compactMap { event -> String? in
            if case .refused(_, let bound, let reason, _) = event { "\(bound): \(reason)" } else { nil }
        }
        #expect(refusals == ["framed-version: \(MessageAssembly.version1Refusal.description)"])
    }

    @Test("a peer that ignores HELLO is read as compat")
    func helloIgnoredFallsBackToCompat() async throws {
        let sink = CollectingSink()
        let run = try await runCentral(against: [.compat(CentralTestData.text)], sink: sink)

        _ = try run.received
        #expect(run.events.compactMap(\.subscribedFormat) == [.compat])
        #expect(run.peripheral.hellos.count == 1)
        #expect(run.peripheral.otherWrites.isEmpty)
        #expect(sink.messages.map(\.payload) == [CentralTestData.text])
        #expect(sink.messages.first?.format == .compat)
    }

    @Test("a peer that disconnects mid-transfer: nothing stored, retried, then the whole message")
    func disconnectMidTransferIsRetried() async throws {
        let payload = CentralTestData.binary(400)
        let sink = CollectingSink()
        let run = try await runCentral(
            CentralTestData.configuration(framed: false),
            against: [.disconnectAfter(payload, bytes: 200), .compat(payload)], sink: sink)

        _ = try run.received
        #expect(sink.messages.map(\.payload) == [payload])
        #expect(run.events.contains { $0.isAborted })
        #expect(run.events.contains { $0.isRetrying })
        #expect(run.peripheral.subscriptions >= 2)
    }

    @Test("a peer that stalls without EOM: the idle timeout drops the transfer, the retry succeeds")
    func stalledTransferTimesOut() async throws {
        let payload = CentralTestData.binary(100)
        let sink = CollectingSink()
        let run = try await runCentral(
            CentralTestData.configuration(idle: .seconds(1), framed: false),
            against: [.stallAfter(payload, bytes: 60), .compat(payload)], sink: sink)

        _ = try run.received
        #expect(sink.messages.map(\.payload) == [payload])
        #expect(run.events.contains { event in
            if case .transferAborted(_, let reason) = event { reason.contains("stalled") } else { false }
        })
    }

    @Test("--output-dir: each message its own complete file, never overwritten")
    func outputDirectoryGetsWholeFiles() async throws {
        let messages = [Array("one".utf8), CentralTestData.binary(64)]
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("central-out-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try await runCentral(
            CentralTestData.configuration(count: 2, framed: false),
            against: [.disconnectAfter(messages[0], bytes: 2)] + messages.map { .compat($0) },
            sink: try OutputDirectorySink(path: .init(directory.path)))

        _ = try run.received
        let stored = run.events.compactMap { event -> String? in
            if case .received(_, _, let path) = event { path } else { nil }
        }
        #expect(stored.count == 2)
        #expect(Set(stored).count == 2)
        let contents = try stored.map { try [UInt8](Data(contentsOf: URL(fileURLWithPath: $0))) }
        #expect(contents == messages)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        #expect(names.count == 2)
        #expect(!names.contains { $0.hasPrefix(".") })
    }

    @Test("unknown adapter name: usage failure listing the adapters present")
    func unknownAdapterIsAUsageError() async throws {
        let error = try await centralFailure(CentralTestData.configuration(adapter: "hci7"))
        #expect(error?.kind == .usage)
        #expect(error?.userMessage.contains("hci0") == true)
        #expect(error?.userMessage.contains("hci1") == true)
    }

    @Test("overall deadline: timedOut when no peripheral offers the service")
    func deadlinePasses() async throws {
        let error = try await centralFailure(timeout: .seconds(2))
        #expect(error?.kind == .timedOut)
    }

    @Test("bluetoothd absent at start: unavailable at once")
    func noBluetoothdFailsFast() async throws {
        let error = try await centralFailure { bus in bus.stopMock() }
        #expect(error?.kind == .unavailable)
    }

    @Test("bluetoothd up but its adapter not announced yet (just restarted): the adapter is waited for",
          .timeLimit(.minutes(1)))
    func adapterAnnouncedJustAfterStartIsUsed() async throws {
        let bus = try await BlueZooBus.start(adapters: 1)
        defer { bus.stop() }
        try await bus.removeAdapter(index: 0)
        let session = try await bus.openSession()
        defer { session.close() }
        let central = Central(configuration: CentralTestData.configuration(), session: session)
        let events = EventRecorder(central.events)
        let run = Task { try await central.run(sink: CollectingSink()) }
        try await bus.addAdapter(index: 0, adapterAddress: "00:AA:00:00:00:01")
        // The mock adds its adapter powered off and at once switches it on, so the first look
        // may find it off, switching (resetting) or on: any of these shows it was used; only
        // unsupported ("no adapter") would mean it was given up on.
        await events.waitFor { $0.stateReached != nil }
        run.cancel()
        _ = try? await run.value
        let states = await events.all().compactMap(\.stateReached)
        let usable: Set<ManagerState> = [.poweredOff, .resetting, .poweredOn]
        #expect(states.first.map(usable.contains) == true, "states: \(states)")
    }

    @Test("bluetoothd without any adapter: unavailable once the grace has passed", .timeLimit(.minutes(1)))
    func noAdapterFailsAfterTheGrace() async throws {
        let error = try await centralFailure(adapters: 1) { bus in try await bus.removeAdapter(index: 0) }
        #expect(error?.kind == .unavailable)
        #expect(error?.userMessage.contains("adapter") == true)
    }

    @Test("leaving poweredOn mid-transfer keeps nothing; back in poweredOn, scanning resumes without a restart")
    func powerCycleTearsDownAndResumes() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let payload = CentralTestData.binary(200)
        let peripheral = try await ScriptedPeripheral.start(
            on: bus, script: [.stallAfter(payload, bytes: 100), .compat(payload)])
        let session = try await bus.openSession()
        defer { session.close() }
        let control = try await bus.openSession()
        defer { control.close() }
        let centralAdapter = try control.adapter(named: "hci0")

        let central = Central(
            configuration: CentralTestData.configuration(idle: .seconds(60), framed: false), session: session)
        let events = EventRecorder(central.events)
        let sink = CollectingSink()
        let run = Task { try await central.run(sink: sink) }

        await events.waitFor { $0.isProgress }
        try await centralAdapter.setPowered(false)
        await events.waitFor { $0.stateReached == .poweredOff }
        #expect(sink.messages.isEmpty)
        try await centralAdapter.setPowered(true)
        #expect(try await run.value == 1)
        await peripheral.stop()

        #expect(sink.messages.map(\.payload) == [payload])
        let all = await events.all()
        let states = all.compactMap(\.stateReached)
        #expect(states.first == .poweredOn)
        #expect(states.contains(.poweredOff))
        #expect(states.last == .poweredOn)
        #expect(all.contains { $0.isAborted })
        #expect(all.filter(\.isScanning).count >= 2)
    }

    @Test("a message the sink refuses ends that visit only: the peer is backed off, the next visit stores it")
    func aRefusedMessageIsNotTheEndOfTheRun() async throws {
        let bytes = CentralTestData.binary(100)
        let sink = RefusingOnceSink()
        let run = try await runCentral(against: [.compat(bytes), .compat(bytes)], sink: sink)

        #expect(try run.received == 1)
        #expect(sink.refusals == 1)
        #expect(sink.messages.map(\.payload) == [bytes])
        let refusals = run.events.compactMap { event -> String? in
            if case .refused(_, let bound, let reason, _) = event { "\(bound): \(reason)" } else { nil }
        }
        #expect(refusals.count == 1 && refusals[0].hasPrefix("storage: the message could not be stored (disk full"),
                "\(refusals)")
        // Apple's flow has no ACK: the sender (which counts on the unsubscription) never saw one.
        #expect(run.peripheral.otherWrites.isEmpty)
    }

    @Test("a sink that cannot write ends the run with ioError")
    func sinkFailureIsNotAcknowledged() async throws {
        let run = try await runCentral(
            against: [.compat(CentralTestData.binary(100))], sink: CollectingSink(failing: SinkFailure(.ioError, "disk full")))

        let error = #expect(throws: SinkFailure.self) { try run.received }
        #expect(error?.kind == .ioError)
        #expect(run.peripheral.hellos.count == 1)
        #expect(run.peripheral.otherWrites.isEmpty)
    }
}
