import Foundation
import BluetoothModel
import BlueZ
import DBus
import Testing

@Suite("UUID strings and error classification (no bus)")
struct ClassificationTests {
    @Test("UUID strings normalise to BlueZ's lower-case 128-bit form", arguments: [
        ("180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0x180d", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0000180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("E20A39F4-73F5-4BC4-A12F-17D1AD07A961", "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"),
        ("E20A39F473F54BC4A12F17D1AD07A961", "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"),
    ])
    func normalise(input: String, expected: String) {
        #expect(BluetoothUUID(parsing: input)?.canonical == expected)
    }

    @Test("malformed UUID strings are refused", arguments: ["", "18", "180G", "E20A39F4-73F5-4BC4-A12F-17D1AD07A96", "E20A39F4_73F5-4BC4-A12F-17D1AD07A961"])
    func malformed(input: String) {
        #expect(BluetoothUUID(parsing: input) == nil)
        #expect(!BluetoothUUID.matches(input, input))
    }

    @Test("D-Bus errors map to what they mean for Bluetooth")
    func mapping() {
        #expect(BluetoothError.from(DBusError(name: DBusError.serviceUnknownName, message: "x")) as? BluetoothError == .bluetoothdNotRunning)
        #expect(BluetoothError.from(DBusError(name: DBusError.nameHasNoOwnerName, message: "x")) as? BluetoothError == .bluetoothdNotRunning)
        #expect(BluetoothError.from(DBusError(name: DBusError.accessDeniedName, message: "no")) as? BluetoothError == .accessDenied("no"))
        #expect(BluetoothError.from(DBusError(name: "org.bluez.Error.InProgress", message: "In Progress")) as? BluetoothError
                == .bluez(.inProgress, message: "In Progress"))
    }

    @Test("BlueZ error names become kinds and back; unknown names are kept as sent",
          arguments: ["org.bluez.Error.InProgress", "org.bluez.Error.Failed", "org.bluez.Error.NotPermitted",
                      "org.bluez.Error.InvalidLength", "org.freedesktop.DBus.Error.UnknownObject",
                      "org.bluez.Error.SomethingNew", "not.a.bluez.Name"])
    func errorKindRoundTrip(name: String) {
        let kind = BlueZErrorKind(errorName: name)
        #expect(kind.errorName == name)
        let unknown = name == "org.bluez.Error.SomethingNew" || name == "not.a.bluez.Name"
        #expect((kind == .other(name)) == unknown)
        #expect(BluetoothError.bluez(kind, message: "m").description == "\(name): m")
    }

    @Test("characteristic flags: BlueZ's names become flags and back; unknown ones are kept",
          arguments: ["read", "write-without-response", "write", "notify", "indicate", "encrypt-authenticated-write",
                      "authorize", "some-future-flag"])
    func characteristicFlagRoundTrip(name: String) {
        let flag = GATTCharacteristicFlag(bluezName: name)
        #expect(flag.bluezName == name)
        #expect((flag == .other(name)) == (name == "some-future-flag"))
    }

    @Test("Bluetooth addresses: either case parses to one value, printed upper-case; anything else is refused")
    func addresses() throws {
        let lower = try #require(BluetoothAddress("00:aa:01:0f:00:42"))
        #expect(lower == BluetoothAddress("00:AA:01:0F:00:42"))
        #expect(lower.description == "00:AA:01:0F:00:42")
        #expect(lower.octets == [0x00, 0xAA, 0x01, 0x0F, 0x00, 0x42])
        #expect(BluetoothAddress(deviceObjectPath: "/org/bluez/hci0/dev_00_AA_01_0F_00_42") == lower)
        for bad in ["", "00:AA:01:0F:00", "00:AA:01:0F:00:42:00", "0:AA:01:0F:00:42", "00:AA:01:0F:00:4G",
                    "00-AA-01-0F-00-42", "00:AA:01:0F:00:042", "00:AA::0F:00:42", "+0:AA:01:0F:00:42"] {
            #expect(BluetoothAddress(bad) == nil, "\(bad)")
        }
        for bad in ["/org/bluez/hci0", "/org/bluez/hci0/dev_00_AA", "/org/bluez/hci0/dev_00_AA_01_0F_00_42/service0001"] {
            #expect(BluetoothAddress(deviceObjectPath: bad) == nil, "\(bad)")
        }
        let encoded = try JSONEncoder().encode([lower])
        #expect(String(decoding: encoded, as: UTF8.self) == #"["00:AA:01:0F:00:42"]"#)
        #expect(try JSONDecoder().decode([BluetoothAddress].self, from: encoded) == [lower])
    }

    @Test("transient connect failures are told apart from permanent ones")
    func transient() {
        #expect(BluetoothError.bluez(.inProgress, message: "In Progress").isTransientConnectFailure)
        #expect(BluetoothError.bluez(.failed, message: "le-connection-abort-by-local").isTransientConnectFailure)
        #expect(BluetoothError.bluez(.failed, message: "br-connection-page-timeout").isTransientConnectFailure)
        #expect(!BluetoothError.bluez(.failed, message: "Operation not supported").isTransientConnectFailure)
        #expect(!BluetoothError.bluez(.doesNotExist, message: "").isTransientConnectFailure)
        #expect(BluetoothError.bluez(.connectionAttemptFailed, message: "").isTransientConnectFailure)
        #expect(BluetoothError.bluez(.dbusNoReply, message: "").isTransientConnectFailure)
        #expect(!BluetoothError.accessDenied("").isTransientConnectFailure)
        #expect(!BluetoothError.bluetoothdNotRunning.isTransientConnectFailure)
    }

    @Test("messages are one line and say what to do")
    func messages() {
        let all: [BluetoothError] = [
            .systemBusUnavailable("no socket"), .bluetoothdNotRunning, .accessDenied("policy"), .noAdapter,
            .unknownAdapter(name: "hci3", available: []), .objectGone("device"), .notFound("service"),
            .deviceDisconnected("peer"), .timedOut("connect"), .bluez(.failed, message: "boom"),
        ]
        for error in all {
            #expect(!error.description.isEmpty)
            #expect(!error.description.contains("\n"))
        }
        #expect(BluetoothError.unknownAdapter(name: "hci3", available: []).description == "no adapter named 'hci3' (adapters present: none)")
    }
}
