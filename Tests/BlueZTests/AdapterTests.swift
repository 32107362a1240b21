import BlueZ
import DBus
import Testing
import TestSupport

@Suite("Adapters, bluetoothd presence and status against BlueZoo on a private bus",
       .enabled(if: TestTools.haveBlueZoo, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .serialized)
struct AdapterTests {
    @Test("adapters are listed in index order with BlueZ's properties")
    func listing() async throws {
        try await withBlueZoo { _, session in
            let adapters = session.adapters()
            #expect(adapters.map(\.name) == ["hci0", "hci1"])
            let hci0 = try #require(adapters.first?.properties)
            #expect(hci0.address.description == TestAddress.hci0)
            #expect(hci0.powered)
            #expect(hci0.powerState == "on")
            #expect(hci0.supportsLowEnergy)
            #expect(hci0.supportsAdvertising)
            #expect(hci0.hasGattManager)
            #expect(hci0.advertising?.activeInstances == 0)
            #expect((hci0.advertising?.supportedInstances ?? 0) > 0)
            #expect(try session.adapter(named: nil).name == "hci0")
            #expect(try session.adapter(named: "hci1").properties?.address.description == TestAddress.hci1)
            #expect(try session.adapter(named: TestAddress.hci1.lowercased()).name == "hci1")
        }
    }

    @Test("an unknown adapter name is a clear error listing the adapters present")
    func unknownAdapter() async throws {
        try await withBlueZoo { _, session in
            #expect(throws: BluetoothError.unknownAdapter(name: "hci7", available: ["hci0", "hci1"])) {
                try session.adapter(named: "hci7")
            }
            let message = BluetoothError.unknownAdapter(name: "hci7", available: ["hci0", "hci1"]).description
            #expect(message == "no adapter named 'hci7' (adapters present: hci0, hci1)")
        }
    }

    @Test("powering off and on shows in the cache and as adapter events")
    func powerToggle() async throws {
        try await withBlueZoo(adapters: 1) { _, session in
            let events = session.adapterEvents(adapterName: "hci0")
            let adapter = try session.adapter(named: "hci0")
            let initial = try await collect(events) { $0.count >= 2 }
            #expect(initial[0] == .bluetoothdAppeared)
            guard case .adapterAdded(let facts) = initial[1] else {
                Issue.record("expected adapterAdded, got \(initial[1])")
                return
            }
            #expect(facts.name == "hci0" && facts.powered && facts.supportsLowEnergy && facts.supportsAdvertising)

            try await adapter.setPowered(false)
            let offEvents = try await collect(events) {
                $0.contains(.poweredChanged(false)) && $0.contains(.powerStateChanged("off"))
            }
            #expect(!offEvents.contains(.poweredChanged(true)))
            #expect(adapter.properties?.powered == false)
            #expect(adapter.properties?.powerState == "off")

            try await adapter.setPowered(true)
            _ = try await collect(events) {
                $0.contains(.poweredChanged(true)) && $0.contains(.powerStateChanged("on"))
            }
            #expect(adapter.properties?.powered == true)
        }
    }

    @Test("an adapter removed and added again is followed by the watcher")
    func adapterRemovedAndAdded() async throws {
        try await withBlueZoo(adapters: 1) { zoo, session in
            let events = session.adapterEvents(adapterName: "hci0")
            _ = try await collect(events) { $0.count >= 2 }
            try await zoo.removeAdapter(id: 0, using: session)
            _ = try await collect(events) { $0.contains(.adapterRemoved) }
            #expect(session.adapters().isEmpty)
            #expect(throws: BluetoothError.noAdapter) { try session.adapter(named: nil) }
            try await zoo.addAdapter(id: 0, address: TestAddress.hci0, using: session)
            let back = try await collect(events) { events in
                events.contains { if case .adapterAdded = $0 { true } else { false } }
            }
            #expect(back.contains { if case .adapterAdded(let facts) = $0 { facts.name == "hci0" } else { false } })
        }
    }

    @Test("discovery on and off is reflected in Discovering")
    func discoveryFlag() async throws {
        try await withBlueZoo(adapters: 1) { _, session in
            let adapter = try session.adapter(named: "hci0")
            try await adapter.setDiscoveryFilter(uuids: ["180D"], transport: .le, duplicateData: true)
            try await adapter.startDiscovery()
            try await session.waitUntil("Discovering is true") { _ in adapter.properties?.discovering == true }
            try await adapter.stopDiscovery()
            try await session.waitUntil("Discovering is false") { _ in adapter.properties?.discovering == false }
            // Stopping again is not an error.
            try await adapter.stopDiscovery()
        }
    }

    @Test("status report: ready, unknown adapter, JSON keys present")
    func statusReport() async throws {
        try await withBlueZoo { zoo, session in
            let report = BluetoothStatusReport.make(session: session, kernel: .noBluetoothInKernel, adapterName: nil)
            #expect(report.bluetoothd == "running")
            #expect(report.adapters.map(\.name) == ["hci0", "hci1"])
            #expect(report.selectedAdapter == "hci0")
            #expect(report.verdict.status == .ready)
            #expect(report.kernel.state == "no-bluetooth-in-kernel")

            let unknown = BluetoothStatusReport.make(session: session, kernel: .controllers([]), adapterName: "hci9")
            #expect(unknown.verdict.status == .unknownAdapter)
            #expect(unknown.verdict.message == "no adapter named 'hci9' (adapters present: hci0, hci1)")

            let hci1 = try session.adapter(named: "hci1")
            try await hci1.setPowered(false)
            try await session.waitUntil("hci1 is off") { _ in hci1.properties?.powered == false }
            let off = BluetoothStatusReport.make(session: session, kernel: .controllers([]), adapterName: "hci1")
            #expect(off.verdict.status == .unavailable)
            #expect(off.verdict.message.hasPrefix("hci1 is powered off"))

            // `gather` opens its own session on the bus.
            let gathered = await BluetoothStatusReport.gather(adapterName: "hci0", address: zoo.bus.address)
            #expect(gathered.verdict.status == .ready)
        }
    }
}

@Suite("bluetoothd absent, appearing, vanishing; access denied",
       .enabled(if: TestTools.haveBlueZoo, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .serialized)
struct ServicePresenceTests {
    @Test("no owner of org.bluez: not running, clear errors, then appear and vanish are followed")
    func absentThenAppearsThenVanishes() async throws {
        let bus = try await PrivateBus.start()
        let session = try await BluetoothSession.open(address: bus.address)
        var zoo: BlueZoo?
        do {
            #expect(session.serviceState == .notRunning)
            #expect(throws: BluetoothError.bluetoothdNotRunning) { try session.adapter(named: nil) }
            let report = BluetoothStatusReport.make(session: session, kernel: .noBluetoothInKernel, adapterName: nil)
            #expect(report.bluetoothd == "not-running")
            #expect(report.verdict.status == .unavailable)
            // No Bluetooth in the kernel and none reported: that is named first, whatever else is missing.
            #expect(report.verdict.message == BluetoothStatusReport.noBluetoothInKernel)
            let withController = BluetoothStatusReport.make(session: session, kernel: .controllers([]), adapterName: nil)
            // One wording for it everywhere: status, the roles' start, BlueZ's error.
            #expect(withController.verdict.message == "bluetoothd is not running")
            #expect(BluetoothError.bluetoothdNotRunning.description == withController.verdict.message)

            let events = session.adapterEvents()
            #expect(try await first(events) == .bluetoothdVanished)

            zoo = try BlueZoo.start(on: bus)
            _ = try await collect(events) { $0.contains(.bluetoothdAppeared) }
            try await waitForBlueZoo(session)
            try await zoo!.addAdapter(id: 0, address: TestAddress.hci0, using: session)
            let added = try await collect(events) { events in
                events.contains { if case .adapterAdded = $0 { true } else { false } }
            }
            #expect(added.contains { if case .adapterAdded(let facts) = $0 { facts.name == "hci0" } else { false } })

            await zoo!.stop()
            _ = try await collect(events) { $0.contains(.bluetoothdVanished) }
            #expect(session.serviceState == .notRunning)
            #expect(session.adapters().isEmpty)
        } catch {
            if let zoo { print("BlueZoo log:\n\(zoo.log)") }
            session.close()
            await zoo?.stop()
            bus.stop()
            throw error
        }
        session.close()
        await zoo?.stop()
        bus.stop()
    }

    @Test("a policy that refuses org.bluez gives accessDenied and a permission-denied verdict")
    func accessDenied() async throws {
        let bus = try await PrivateBus.start(policy: .denyBlueZ)
        let zoo = try BlueZoo.start(on: bus)
        // Watch the name owner on a plain connection: our session must see the owner first.
        let session = try await BluetoothSession.open(address: bus.address)
        do {
            try await session.waitUntil("org.bluez is owned but refused") { session in
                if case .accessDenied = session.serviceState { return true }
                return false
            }
            #expect(throws: BluetoothError.self) { try session.adapter(named: nil) }
            let report = BluetoothStatusReport.make(session: session, kernel: .noBluetoothInKernel, adapterName: nil)
            #expect(report.bluetoothd == "access-denied")
            #expect(report.verdict.status == .permissionDenied)
            let events = session.adapterEvents()
            #expect(try await first(events) == .accessDenied)
        } catch {
            print("BlueZoo log:\n\(zoo.log)")
            session.close()
            await zoo.stop()
            bus.stop()
            throw error
        }
        session.close()
        await zoo.stop()
        bus.stop()
    }

    @Test("no system bus at the given address is a clear error")
    func noBus() async throws {
        await #expect(throws: BluetoothError.self) {
            _ = try await BluetoothSession.open(address: "unix:path=/nonexistent/bletransfer-no-bus")
        }
        let report = await BluetoothStatusReport.gather(adapterName: nil, address: "unix:path=/nonexistent/bletransfer-no-bus")
        #expect(report.bluetoothd == "no-system-bus")
        #expect(report.verdict.status == .unavailable)
        // A kernel without Bluetooth (this one, maybe) is the problem named first; otherwise the bus.
        if report.hasNoBluetoothAtAll {
            #expect(report.verdict.message == BluetoothStatusReport.noBluetoothInKernel)
        } else {
            #expect(report.verdict.message.hasPrefix("cannot reach the D-Bus system bus"))
        }
        #expect(report.bluetoothdDetail?.hasPrefix("cannot reach the D-Bus system bus") == true)
    }
}
