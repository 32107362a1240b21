extension BluetoothUUID {
    /// `text` as a UUID, nil when it is not one: for strings BlueZ or a peer reports.
    public init?(parsing text: String) {
        guard let uuid = try? BluetoothUUID(text) else { return nil }
        self = uuid
    }

    /// True when both strings name the same UUID in any spelling (false when either is malformed).
    public static func matches(_ lhs: String, _ rhs: String) -> Bool {
        guard let a = BluetoothUUID(parsing: lhs), let b = BluetoothUUID(parsing: rhs) else { return false }
        return a == b
    }

    /// `text` in BlueZ's lower-case dashed 128-bit form when a UUID; else lower-cased, for bluetoothd to refuse.
    public static func canonicalOrLowercased(_ text: String) -> String {
        BluetoothUUID(parsing: text)?.canonical ?? text.lowercased()
    }
}
