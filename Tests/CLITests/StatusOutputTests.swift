import BlueZ
import Foundation
import Testing

@testable import bletransfer

/// `bletransfer status` as a person reads it: the verdict first, the command that fixes each
/// problem, lines that fit 100 columns.
@Suite struct StatusOutputTests {
    static let gatt = GATTChannelSetting(channels: 3, file: "/etc/bluetooth/main.conf", isExplicit: false)
    static let link = LinkSpeedSetting(minimumConnectionInterval: nil, maximumConnectionInterval: nil,
                                       exchangeMTU: 517, file: nil)
    static let queue = NotificationQueueLimit(datagrams: 10)

    /// A report as bluetoothd and the kernel could give it, from the JSON `status --json` prints.
    static func report(bluetoothd: String = "running", powered: Bool = true, adapters: Bool = true,
                       kernel: String = "ok", verdict: String, message: String) throws -> BluetoothStatusReport {
        let adapter = """
            {"name": "hci0", "path": "/org/bluez/hci0", "address": "00:AA:01:00:00:23", "alias": "lab",
             "powered": \(powered), "powerState": \(powered ? "\"on\"" : "\"off-blocked\""), "discovering": false,
             "roles": ["central", "peripheral"], "supportsLowEnergy": true, "supportsAdvertising": true,
             "advertising": null, "gattServer": true, "kernel": null}
            """
        let json = """
            {"bluetoothd": "\(bluetoothd)", "bluetoothdDetail": null,
             "kernel": {"state": "\(kernel)", "detail": null, "controllers": []},
             "adapters": [\(adapters ? adapter : "")], "selectedAdapter": \(adapters ? "\"hci0\"" : "null"),
             "verdict": {"status": "\(verdict)", "message": "\(message)"}}
            """
        return try JSONDecoder().decode(BluetoothStatusReport.self, from: Data(json.utf8))
    }

    static func lines(_ report: BluetoothStatusReport) -> [String] {
        StatusOutput.text(report, gatt: gatt, link: link, notificationQueue: queue)
            .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    }

    @Test func aReadyHostSaysSoFirstAndEveryLineFits() throws {
        let lines = Self.lines(try Self.report(verdict: "ready", message: "hci0 is ready (powered, LE, can advertise)"))
        #expect(lines.first == "ready: hci0 is ready (powered, LE, can advertise)")
        #expect(!lines.contains { $0.hasPrefix("fix:") })
        // Three GATT channels: the Apple-flow note names the setting and the restart.
        #expect(lines.contains { $0.hasPrefix("note:") && $0.contains("Channels = 1") })
        #expect(lines.allSatisfy { $0.count <= StatusOutput.width }, "\(lines.filter { $0.count > 100 })")
        // The long GATT explanation is still there, wrapped instead of cut.
        #expect(lines.contains { $0.hasPrefix("GATT channels: 3") })
    }

    @Test func eachProblemComesWithTheCommandThatFixesIt() throws {
        let cases: [(BluetoothStatusReport, String)] = [
            (try Self.report(bluetoothd: "not-running", adapters: false, verdict: "unavailable",
                             message: "bluetoothd is not running"), "systemctl start bluetooth"),
            (try Self.report(powered: false, verdict: "unavailable", message: "hci0 is powered off"),
             "rfkill unblock bluetooth && bluetoothctl power on"),
            (try Self.report(bluetoothd: "access-denied", adapters: false, verdict: "permission-denied",
                             message: "access denied"), "D-Bus policy"),
            (try Self.report(bluetoothd: "no-system-bus", adapters: false, verdict: "unavailable",
                             message: "no bus"), "systemctl start dbus"),
            (try Self.report(adapters: false, verdict: "unavailable", message: "no Bluetooth adapter"),
             "plug in a Bluetooth LE adapter"),
        ]
        for (report, fix) in cases {
            let lines = Self.lines(report)
            #expect(lines.first?.hasPrefix("not ready: ") == true, "\(lines.first ?? "")")
            #expect(lines.dropFirst().first?.hasPrefix("fix: ") == true && lines[1].contains(fix), "\(lines.prefix(3))")
            #expect(lines.allSatisfy { $0.count <= StatusOutput.width })
        }
    }

    @Test func wrappingKeepsEveryWordAndIndentsContinuations() {
        let words = (1...60).map { "word\($0)" }
        let wrapped = StatusOutput.wrapped("  " + words.joined(separator: " "), width: 40)
        #expect(wrapped.count > 1)
        #expect(wrapped.allSatisfy { $0.count <= 40 })
        #expect(wrapped.dropFirst().allSatisfy { $0.hasPrefix("      ") })
        #expect(wrapped.joined(separator: " ").split(separator: " ").map(String.init) == words)
    }

    /// No Bluetooth at all (a VM's kernel, no bus): the first line names that, the fix says what
    /// to do, and the sections about bluetoothd's settings and the roles' states are left out.
    @Test func noBluetoothAtAllSaysSoAndLeavesOutWhatDoesNotApply() throws {
        let report = try Self.report(bluetoothd: "no-system-bus", adapters: false, kernel: "no-bluetooth-in-kernel",
                                     verdict: "unavailable", message: BluetoothStatusReport.noBluetoothInKernel)
        let lines = Self.lines(report)
        #expect(lines.first == "not ready: no Bluetooth adapter: the kernel has no Bluetooth (a VM or a container?)")
        #expect(lines.dropFirst().first?.hasPrefix("fix: run on a host with a Bluetooth LE adapter") == true)
        for section in ["manager state:", "GATT channels:", "link:", "notification queue:", "note:"] {
            #expect(!lines.contains { $0.hasPrefix(section) }, "\(section)")
        }
        #expect(lines.contains { $0.hasPrefix("kernel: no Bluetooth support") })
    }

    /// `status --json` is in the contract: a schema version, and every key it prints listed in
    /// docs/json-events.md ("The status report").
    @Test func theJSONReportHasASchemaAndEveryKeyIsDocumented() throws {
        let text = try StatusOutput.json(try Self.report(verdict: "ready", message: "hci0 is ready"),
                                         gatt: Self.gatt, link: Self.link, notificationQueue: Self.queue)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
        #expect(object["schema"] as? Int == StatusOutput.schema)
        #expect(object["fixes"] as? [String] == [])
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/json-events.md")
        let doc = try String(contentsOf: url, encoding: .utf8)
        let section = try #require(doc.components(separatedBy: "## The status report").dropFirst().first)
            .components(separatedBy: "\n## ").first ?? ""
        for key in object.keys {
            #expect(section.contains("\n| \(key) |"), "status --json key \(key) is not documented")
        }
    }
}
