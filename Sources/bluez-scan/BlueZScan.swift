import BlueZ
import Foundation

// The BlueZ library's example, public API only: lists the adapters bluetoothd knows, then runs discovery on the first
// powered one for a few seconds and prints each device seen. DBUS_SYSTEM_BUS_ADDRESS points it at another bus.
//
//   swift run bluez-scan [SECONDS]    (5 by default; 0 only lists the adapters)
@main
struct BlueZScan {
    static func main() async {
        let seconds = CommandLine.arguments.count > 1 ? Int(CommandLine.arguments[1]) : 5
        guard let seconds, seconds >= 0, CommandLine.arguments.count <= 2 else {
            complain("usage: bluez-scan [SECONDS]")
            exit(64)
        }
        do {
            try await scan(for: .seconds(seconds))
        } catch {
            complain("bluez-scan: \(error)")
            exit(1)
        }
    }

    static func scan(for duration: Duration) async throws {
        let session = try await BluetoothSession.open()
        defer { session.close() }
        try session.requireService()
        let adapters = session.adapters()
        if adapters.isEmpty { print("no adapter") }
        for adapter in adapters {
            guard let properties = adapter.properties else { continue }
            let power = properties.powered ? "powered" : "off"
            print("\(adapter.name) \(properties.address) \(power), LE \(properties.supportsLowEnergy ? "yes" : "no")")
        }
        guard duration > .zero, let adapter = adapters.first(where: { $0.properties?.powered == true }) else { return }

        // Subscribe before discovery starts, so that no sighting is missed.
        let sightings = adapter.sightings(serviceUUID: nil)
        try await adapter.setDiscoveryFilter(transport: .le)
        try await adapter.startDiscovery()
        print("discovering on \(adapter.name) for \(duration)")
        let printer = Task {
            var seen: Set<DeviceReference> = []
            for await sighting in sightings where seen.insert(sighting.device.reference).inserted {
                guard let device = sighting.device.properties else { continue }
                print("\(device.address) \(device.displayName) RSSI \(device.rssi.map { "\($0)" } ?? "unknown")")
            }
        }
        try await Task.sleep(for: duration)
        printer.cancel()
        try await adapter.stopDiscovery()
    }

    static func complain(_ line: String) { FileHandle.standardError.write(Data((line + "\n").utf8)) }
}
