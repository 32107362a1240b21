import BlueZ
import DBus
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A private `dbus-daemon` with BlueZoo (the BlueZ D-Bus mock, `pip install bluezoo`) owning
/// org.bluez on it, with adapters that see each other: hci0 and hci1 by default, powered. One
/// per test; `stop()` (or deinit) ends both processes and removes the socket directory.
///
/// Roles talk to it through `BluetoothSession.open(address:)`; a command under test gets
/// `DBUS_SYSTEM_BUS_ADDRESS=address`.
package final class BlueZooBus: Sendable {
    package let bus: PrivateBus
    package var address: String { bus.address }
    package var directory: URL { bus.directory }
    package let adapterAddresses: [String]
    private let mock: SpawnedProcess

    /// The Python interpreter BlueZoo was installed for: the one its entry script names.
    package static var bluezooPython: String? {
        guard let script = TestTools.bluezoo,
            let text = try? String(contentsOfFile: script, encoding: .utf8),
            let first = text.split(separator: "\n").first, first.hasPrefix("#!")
        else { return nil }
        let interpreter = String(first.dropFirst(2)).trimmingCharacters(in: .whitespaces)
        if interpreter.hasPrefix("/"), !interpreter.contains(" "), FileManager.default.isExecutableFile(atPath: interpreter) {
            return interpreter
        }
        // pyenv shims and `#!/usr/bin/env python3` scripts: the python3 on PATH.
        return TestTools.find("python3")
    }

    /// Runs BlueZoo with one behaviour of real BlueZ added (written next to the bus socket).
    static let teardownShim = #"""
# Runs BlueZoo (the BlueZ D-Bus mock) with one behaviour of real BlueZ added: when a central
# disconnects from an unbonded LE device, the device's remote GATT objects are removed and
# ServicesResolved turns false. Stock BlueZoo keeps those objects exported, so a second
# Device1.Connect to the same peer fails (it exports them again at the same paths), and a
# central could never receive two messages in a row from one peripheral.
import sys

from bluezoo import bluezoo
from bluezoo.device import Device

_disconnect = Device.disconnect


async def disconnect_and_drop_gatt(self, uuid=None):
    await _disconnect(self, uuid)
    for link in list(self.services.values()):
        try:
            self.peer_adapter.mock.remove_object(link)
        except KeyError:
            pass
    self.services.clear()
    if self.services_resolved:
        await self.ServicesResolved.set_async(False)


Device.disconnect = disconnect_and_drop_gatt

if __name__ == "__main__":
    sys.argv[0] = "bluezoo"
    sys.exit(bluezoo.main())
"""#

    /// Whether the tools exist: bus tests are enabled only then (CI installs both through
    /// scripts/setup.sh).
    package static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: PrivateBus.daemonPath) && bluezooPython != nil
    }

    /// Starts the bus and the mock and returns once every adapter is exported and powered.
    package static func start(adapters: Int = 2, scanInterval: Int = 1) async throws -> BlueZooBus {
        guard TestTools.bluezoo != nil, let python = bluezooPython else { throw TestBusStartError.missing("bluezoo") }
        let bus = try await PrivateBus.start()
        let directory = bus.directory
        let address = bus.address

        let adapterAddresses = (0..<adapters).map { String(format: "00:AA:00:00:00:%02X", $0 + 1) }
        // BlueZoo's own module, run with the GATT tear-down real BlueZ does on disconnect.
        let shim = directory.appendingPathComponent("bluezoo-with-gatt-teardown.py")
        try teardownShim.write(to: shim, atomically: true, encoding: .utf8)
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = address
        let log = directory.appendingPathComponent("bluezoo.log")
        let logDescriptor = open(log.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard logDescriptor >= 0 else { throw SpawnError(call: "open \(log.path)", errno: errno) }
        defer { close(logDescriptor) }
        let mock = try SpawnedProcess(
            executable: python,
            arguments: [shim.path, "--auto-enable", "--scan-interval", "\(scanInterval)", "-v"]
                + adapterAddresses.flatMap { ["-a", $0] },
            environment: environment, standardOutput: .descriptor(logDescriptor), standardError: .descriptor(logDescriptor))

        let zoo = BlueZooBus(bus: bus, adapterAddresses: adapterAddresses, mock: mock)
        do {
            try await zoo.waitUntilReady(adapters: adapters)
        } catch {
            let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
            zoo.stop()
            throw TestBusStartError.mockDidNotStart("\(error); log: \(output.suffix(2000))")
        }
        return zoo
    }

    private init(bus: PrivateBus, adapterAddresses: [String], mock: SpawnedProcess) {
        self.bus = bus
        self.adapterAddresses = adapterAddresses
        self.mock = mock
    }

    deinit { stop() }

    /// A session on this bus, as a role opens it.
    package func openSession() async throws -> BluetoothSession {
        try await BluetoothSession.open(address: address)
    }

    /// Ends bluezoo (org.bluez loses its owner), then the bus. Idempotent.
    package func stop() {
        stopMock()
        bus.stop()
    }

    /// Ends only bluezoo: to the roles, bluetoothd went away.
    package func stopMock() {
        mock.stop()
    }

    /// Calls org.bluezoo.Manager1: a new adapter hci<index> (powered when the mock
    /// auto-enables adapters, as started here).
    package func addAdapter(index: UInt8, adapterAddress: String) async throws {
        let connection = try await DBusConnection.connect(address: address)
        defer { connection.close() }
        _ = try await connection.call(destination: "org.bluez", path: "/org/bluezoo", interface: "org.bluezoo.Manager1",
                                      method: "AddAdapter", arguments: [.byte(index), .string(adapterAddress)])
    }

    /// Calls org.bluezoo.Manager1 (add or remove adapters at run time).
    package func removeAdapter(index: UInt8) async throws {
        let connection = try await DBusConnection.connect(address: address)
        defer { connection.close() }
        _ = try await connection.call(destination: "org.bluez", path: "/org/bluezoo", interface: "org.bluezoo.Manager1",
                                      method: "RemoveAdapter", arguments: [.byte(index)])
    }

    /// Waits until `adapters` adapters are exported and powered. Asks org.bluez directly
    /// (GetManagedObjects) at start and after every signal from the bus, so the answer does not
    /// depend on the order in which a session cache applies the mock's start-up signals.
    private func waitUntilReady(adapters: Int) async throws {
        let connection = try await DBusConnection.connect(address: address)
        defer { connection.close() }
        let signals = try await connection.signals(matching: MatchRule())
        @Sendable func ready() async -> Bool {
            guard let reply = try? await connection.call(
                destination: "org.bluez", path: .root, interface: "org.freedesktop.DBus.ObjectManager",
                method: "GetManagedObjects", timeout: .seconds(2)),
                let objects = reply.first?.managedObjects
            else { return false }
            let powered = objects.values.compactMap { $0["org.bluez.Adapter1"] }.filter { $0["Powered"]?.bool == true }
            return powered.count >= adapters
        }
        if await ready() { return }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in signals where await ready() { return }
            }
            group.addTask {
                try await Task.sleep(for: .seconds(20))
                throw TestBusStartError.mockDidNotStart("adapters not powered within 20 s")
            }
            defer { group.cancelAll() }
            try await group.next()
        }
    }
}
