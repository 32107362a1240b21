import BlueZ
import Foundation
import Testing
import TestSupport

@Suite("The library's example, bluez-scan, run against BlueZoo on a private bus",
       .enabled(if: TestTools.haveBlueZoo, "needs dbus-daemon and bluezoo (pip install bluezoo)"),
       .serialized)
struct ExampleTests {
    @Test("it lists both adapters, then finds hci1's advertisement from hci0")
    func scanFindsAnAdvertiser() async throws {
        try await withBlueZoo { zoo, session in
            let hci1 = try session.adapter(named: "hci1")
            let advertisement = LEAdvertisement(session: session, configuration: AdvertisementConfiguration(
                serviceUUIDs: ["0000feed-0000-1000-8000-00805f9b34fb"], localName: "bluez-scan-test"))
            try await advertisement.withRegistration(on: hci1) {
                let result = try await runOffThePool {
                    try BuiltTool.run(["3"], named: "bluez-scan", extraEnvironment: ["DBUS_SYSTEM_BUS_ADDRESS": zoo.bus.address])
                }
                #expect(result.status == 0, "stderr: \(result.err)")
                let lines = result.out.split(separator: "\n").map(String.init)
                #expect(lines.prefix(3) == [
                    "hci0 \(TestAddress.hci0) powered, LE yes",
                    "hci1 \(TestAddress.hci1) powered, LE yes",
                    "discovering on hci0 for 3.0 seconds",
                ])
                #expect(lines.dropFirst(3).contains { $0.hasPrefix("\(TestAddress.hci1) ") }, "output: \(result.out)")
            }
        }
    }
}

/// Runs `work` on a thread of its own: waiting for a process would hold one of the few threads
/// of the cooperative pool the advertisement's D-Bus handlers run on.
private func runOffThePool<Value: Sendable>(_ work: @escaping @Sendable () throws -> Value) async throws -> Value {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try work() }) }.start()
    }
}
