import BlueZ
import DBus
@testable import Machines
@testable import Roles
import ServiceLifecycleTestKit
@testable import Storage
import Testing
import Transfer
import TestSupport

/// A stop (the service group's graceful shutdown, as SIGINT, SIGTERM or `--timeout` start it)
/// ends both roles without cancelling them: the run returns what it did, and what the role had
/// registered or started with bluetoothd is undone by the role's own, uncancelled task.
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(2)))
struct RoleStopBlueZooTests {
    @Test("a stop ends the sender's run with its count and unregisters the application and the advertisement")
    func peripheralStopsAndUnregisters() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let observer = try await bus.openSession()
        defer { observer.close() }
        let probe = RegistrationProbe(observer: observer)

        try await testGracefulShutdown { trigger in
            // Started inside the test's graceful-shutdown scope: the run's task inherits it.
            let running = try await PeripheralBlueZooTests.Running.start(on: bus, payload: Array("bye".utf8), count: nil)
            await probe.wait(until: (true, 1))
            #expect(probe.registered() == (true, 1))

            trigger.triggerGracefulShutdown()
            let (delivered, events) = try await running.finish()
            #expect(delivered == 0)
            #expect(!events.contains { if case .retrying = $0 { true } else { false } })
        }
        // Our session is still open: only the role's own unregistration can have removed them.
        await probe.wait(until: (false, 0))
        #expect(probe.registered() == (false, 0))
    }

    @Test("a stop while scanning ends the receiver's run with its count and stops discovery")
    func centralStopsScanning() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let session = try await bus.openSession()
        defer { session.close() }
        let adapterPath: ObjectPath = "/org/bluez/hci0"
        @Sendable func discovering() -> Bool {
            session.properties(of: adapterPath, interface: BlueZInterface.adapter)?["Discovering"]?.bool ?? false
        }

        let received = try await testGracefulShutdown { trigger in
            let central = Central(configuration: CentralTestData.configuration(count: nil), session: session)
            let events = EventRecorder(central.events)
            let run = Task { try await central.run(sink: CollectingSink()) }
            await events.waitFor { if case .scanning = $0 { true } else { false } }
            trigger.triggerGracefulShutdown()
            let received = try await run.value
            let all = await events.all()
            #expect(!all.contains { if case .retrying = $0 { true } else { false } })
            return received
        }
        #expect(received == 0)
        // The run stopped discovery before it returned (one session of ours, nobody else scans).
        let changes = session.changes()
        if discovering() {
            for await _ in changes where !discovering() { break }
        }
        #expect(!discovering())
    }
}
