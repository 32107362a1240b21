import BlueZ
import DBus
import Foundation
import Testing
import TestSupport

/// Two `bletransfer daemon` processes on BlueZoo's private bus: a sender serving an outbox on
/// hci0, a receiver storing into an inbox on hci1.
@Suite(.serialized,
       .enabled(if: BlueZooBus.isAvailable && DaemonProcess.executable != nil,
                "needs dbus-daemon, bluezoo (pip install bluezoo) and the bletransfer executable"),
       // Under BlueZoo the sender never sees the second message's ACK arrive (the mock ends
       // the first subscription without the release the engine waits for), so it serves that
       // message again and again and the receiver stores copies (tried again 2026-11: still
       // so). Against bluetoothd the same flow passes: the lab's `daemon-twenty-files` and
       // `secure-daemons` scenarios check it.
       .disabled("waits for the peripheral engine to notice a central's hang-up under BlueZoo"),
       .timeLimit(.minutes(2)))
struct DaemonBlueZooTests {
    final class Workspace {
        let root: URL
        var outbox: URL { root.appendingPathComponent("outbox") }
        var inbox: URL { root.appendingPathComponent("inbox") }

        init() throws {
            root = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-daemon-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: root.appendingPathComponent("outbox"), withIntermediateDirectories: true)
        }

        deinit { try? FileManager.default.removeItem(at: root) }

        func drop(_ name: String, _ bytes: [UInt8], secondsAgo: Double) throws {
            let hidden = outbox.appendingPathComponent(".\(name)")
            try Data(bytes).write(to: hidden)
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -secondsAgo)],
                                                  ofItemAtPath: hidden.path)
            try FileManager.default.moveItem(at: hidden, to: outbox.appendingPathComponent(name))
        }

        func files(in directory: URL) -> [String] {
            let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
            return names.filter { name in
                var isDirectory: ObjCBool = false
                return FileManager.default.fileExists(atPath: directory.appendingPathComponent(name).path,
                                                      isDirectory: &isDirectory) && !isDirectory.boolValue
            }.sorted()
        }
    }

    @Test("sender daemon with 5 outbox files → receiver daemon stores 5 identical files in order; outbox empty, sent/ has 5; SIGTERM leaves nothing registered")
    func fiveFilesThenSIGTERM() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let workspace = try Workspace()
        var generator = SystemRandomNumberGenerator()
        let payloads: [[UInt8]] = [
            Array("Grüße — first file\n".utf8),
            (0..<3000).map { _ in UInt8.random(in: 0...255, using: &generator) },
            Array(repeating: UInt8(ascii: "x"), count: 700),
            Array("EOM".utf8),
            (0..<20).map { UInt8($0) },
        ]
        for (index, payload) in payloads.enumerated() {
            try workspace.drop("file\(index + 1).dat", payload, secondsAgo: Double(100 - index))
        }

        let receiver = try DaemonProcess(
            arguments: ["daemon", "--role", "receiver", "--insecure-any-peer", "--adapter", "hci1", "--output-dir", workspace.inbox.path,
                        "--json", "--log-level", "debug"],
            busAddress: bus.address, logFile: workspace.root.appendingPathComponent("receiver.log"))
        defer { receiver.kill() }
        let sender = try DaemonProcess(
            arguments: ["daemon", "--role", "sender", "--insecure-any-peer", "--adapter", "hci0", "--outbox", workspace.outbox.path,
                        "--settle-time", "0", "--json", "--log-level", "debug"],
            busAddress: bus.address, logFile: workspace.root.appendingPathComponent("sender.log"))
        defer { sender.kill() }

        let allSent = await sender.waitForEvents("sent", count: payloads.count)
        let allReceived = await receiver.waitForEvents("received", count: payloads.count)
        #expect(allSent, "sender log:\n\(sender.log.suffix(3000))")
        #expect(allReceived, "receiver log:\n\(receiver.log.suffix(3000))")

        // Both are serving / scanning again now; SIGTERM must unregister and exit 0.
        #expect(await sender.terminate() == 0, "sender log:\n\(sender.log.suffix(2000))")
        #expect(await receiver.terminate() == 0, "receiver log:\n\(receiver.log.suffix(2000))")
        // With --json the last event says how each ended: stopped by SIGTERM, exit 0.
        for daemon in [sender, receiver] {
            let stopped = daemon.events("stopped")
            #expect(stopped.count == 1 && stopped.first?["signal"] as? String == "SIGTERM" && stopped.first?["exitStatus"] as? Int == 0)
        }

        // The inbox: one complete file per message, in arrival order, nothing hidden or partial.
        let stored = workspace.files(in: workspace.inbox)
        #expect(stored.count == payloads.count)
        #expect(stored.allSatisfy { $0.hasPrefix("message-") })
        let contents = try stored.map { [UInt8](try Data(contentsOf: workspace.inbox.appendingPathComponent($0))) }
        #expect(contents == payloads)
        // The outbox: empty, every file once in sent/.
        #expect(workspace.files(in: workspace.outbox) == [])
        #expect(workspace.files(in: workspace.outbox.appendingPathComponent("sent")) == (1...5).map { "file\($0).dat" })
        let sentEvents = sender.events("sent").compactMap { $0["file"] as? String }
        #expect(sentEvents == (1...5).map { "file\($0).dat" })

        // Nothing left registered with "bluetoothd": no advertisement on hci0, no discovery
        // on hci1, and the GATT application was unregistered.
        let session = try await bus.openSession()
        defer { session.close() }
        let advertising = try await session.currentProperties(of: ObjectPath("/org/bluez/hci0"),
                                                              interface: "org.bluez.LEAdvertisingManager1")
        #expect(advertising?["ActiveInstances"]?.byte == 0)
        let scanning = try await session.currentProperties(of: ObjectPath("/org/bluez/hci1"), interface: "org.bluez.Adapter1")
        #expect(scanning?["Discovering"]?.bool == false)
        let mockLog = (try? String(contentsOf: bus.directory.appendingPathComponent("bluezoo.log"), encoding: .utf8)) ?? ""
        #expect(mockLog.contains("Removing GATT application"))
    }

    @Test("a sender daemon stopped with SIGTERM and started again sends the remaining files, each exactly once")
    func restartSendsRemainingExactlyOnce() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let workspace = try Workspace()
        let payloads = (1...3).map { Array("message number \($0)".utf8) }
        for (index, payload) in payloads.enumerated() {
            try workspace.drop("m\(index + 1).txt", payload, secondsAgo: Double(100 - index))
        }
        let receiver = try DaemonProcess(
            arguments: ["daemon", "--role", "receiver", "--insecure-any-peer", "--adapter", "hci1", "--output-dir", workspace.inbox.path, "--json"],
            busAddress: bus.address, logFile: workspace.root.appendingPathComponent("receiver.log"))
        defer { receiver.kill() }

        let senderArguments = ["daemon", "--role", "sender", "--insecure-any-peer", "--adapter", "hci0", "--outbox", workspace.outbox.path,
                               "--settle-time", "0", "--json"]
        let first = try DaemonProcess(arguments: senderArguments, busAddress: bus.address,
                                      logFile: workspace.root.appendingPathComponent("sender1.log"))
        defer { first.kill() }
        #expect(await first.waitForEvents("sent", count: 1), "sender log:\n\(first.log.suffix(3000))")
        #expect(await first.terminate() == 0)

        let second = try DaemonProcess(arguments: senderArguments, busAddress: bus.address,
                                       logFile: workspace.root.appendingPathComponent("sender2.log"))
        defer { second.kill() }
        #expect(await second.waitForEvents("sent", count: 2), "sender log:\n\(second.log.suffix(3000))")
        #expect(await receiver.waitForEvents("received", count: 3), "receiver log:\n\(receiver.log.suffix(3000))")
        #expect(await second.terminate() == 0)
        #expect(await receiver.terminate() == 0)

        let sentFirst = first.events("sent").compactMap { $0["file"] as? String }
        let sentSecond = second.events("sent").compactMap { $0["file"] as? String }
        #expect(sentFirst + sentSecond == ["m1.txt", "m2.txt", "m3.txt"])
        let stored = workspace.files(in: workspace.inbox)
        let contents = try stored.map { [UInt8](try Data(contentsOf: workspace.inbox.appendingPathComponent($0))) }
        #expect(contents == payloads)
        #expect(workspace.files(in: workspace.outbox) == [])
    }
}
