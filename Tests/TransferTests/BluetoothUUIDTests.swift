import Testing
import Transfer

@Suite struct BluetoothUUIDTests {
    @Test(arguments: [
        ("180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0x180d", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0X180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0000180D", "0000180d-0000-1000-8000-00805f9b34fb"),
        ("0x1234ABCD", "1234abcd-0000-1000-8000-00805f9b34fb"),
        ("E20A39F4-73F5-4BC4-A12F-17D1AD07A961", "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"),
        ("e20a39f473f54bc4a12f17d1ad07a961", "e20a39f4-73f5-4bc4-a12f-17d1ad07a961"),
        (" {08590F7E-DB05-467E-8757-72F6FAEB13D4}\n", "08590f7e-db05-467e-8757-72f6faeb13d4"),
    ])
    func parsesAndNormalises(input: String, canonical: String) throws {
        let uuid = try BluetoothUUID(input)
        #expect(uuid.canonical == canonical)
        #expect(uuid.description == canonical)
        #expect(uuid.bytes.count == 16)
        #expect(try BluetoothUUID(canonical) == uuid)
    }

    @Test func shortFormsEqualTheirExpansion() throws {
        #expect(try BluetoothUUID("180D") == BluetoothUUID("0000180d-0000-1000-8000-00805F9B34FB"))
        #expect(try BluetoothUUID("180D").shortValue == 0x180D)
        #expect(TransferUUIDs.appleSampleService.shortValue == nil)
    }

    @Test func bytesAreBigEndian() throws {
        let uuid = try BluetoothUUID("0x180D")
        #expect(uuid.bytes == [0, 0, 0x18, 0x0D, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB])
        #expect(BluetoothUUID(bytes: uuid.bytes) == uuid)
        #expect(BluetoothUUID(bytes: [1, 2, 3]) == nil)
    }

    @Test func appleSampleDefaults() {
        #expect(TransferUUIDs.appleSampleService.canonical == "e20a39f4-73f5-4bc4-a12f-17d1ad07a961")
        #expect(TransferUUIDs.appleSampleCharacteristic.canonical == "08590f7e-db05-467e-8757-72f6faeb13d4")
    }

    @Test(arguments: [
        ("", "empty"),
        ("   ", "empty"),
        ("18D", "found 3"),
        ("0x18D", "4 or 8 hex digits"),
        ("0x12345678901234567890123456789012", "4 or 8 hex digits"),
        ("180G", "\"G\" is not a hex digit"),
        ("E20A39F4-73F5-4BC4-A12F-17D1AD07A96", "8-4-4-4-12"),
        ("E20A39F4-73F54BC4-A12F-17D1AD07A961", "8-4-4-4-12"),
        ("E20A39F4--73F5-4BC4-A12F-17D1AD07A96", "8-4-4-4-12"),
        ("e20a39f473f54bc4a12f17d1ad07a96", "found 31"),
        ("１８０Ｄ", "is not a hex digit"),
        ("18 0D", "\" \" is not a hex digit"),
    ])
    func rejectsMalformedWithAClearMessage(input: String, fragment: String) {
        #expect {
            _ = try BluetoothUUID(input)
        } throws: { error in
            guard let error = error as? UUIDParseError else { return false }
            let message = error.description
            return message.contains(fragment) && message.contains("\"\(input)\"") && !message.contains("\n")
        }
    }
}
