/// A Bluetooth UUID in any of its three textual forms, normalised to the 128-bit value: 16- and 32-bit UUIDs are
/// shorthands for the base UUID `0000xxxx-0000-1000-8000-00805f9b34fb` (Core Vol 3, Part B, 2.5.1), expanded so two
/// spellings of one UUID compare equal.
public struct BluetoothUUID: Hashable, Sendable, CustomStringConvertible {
    public let bytes: [UInt8]  // 16, most significant first (as written in text)

    /// The trailing 12 bytes of the Bluetooth base UUID.
    private static let baseSuffix: [UInt8] = [
        0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0x80, 0x5F, 0x9B, 0x34, 0xFB,
    ]

    /// Parses `"180D"`, `"0x180D"`, `"0000180D"`, `"E20A39F4-73F5-4BC4-A12F-17D1AD07A961"`, the same without dashes, in
    /// any case, with surrounding whitespace or braces.
    public init(_ text: String) throws(UUIDParseError) {
        var body = Substring(text)
        while let first = body.first, first.isWhitespace { body.removeFirst() }
        while let last = body.last, last.isWhitespace { body.removeLast() }
        if body.hasPrefix("{") && body.hasSuffix("}") && body.count >= 2 {
            body = body.dropFirst().dropLast()
        }
        guard !body.isEmpty else {
            throw UUIDParseError(input: text, reason: "it is empty")
        }
        if body.hasPrefix("0x") || body.hasPrefix("0X") {
            body = body.dropFirst(2)
            guard body.count == 4 || body.count == 8 else {
                throw UUIDParseError(
                    input: text, reason: "a 0x-prefixed UUID needs 4 or 8 hex digits, found \(body.count) characters")
            }
        }

        if body.contains("-") {
            let groups = body.split(separator: "-", omittingEmptySubsequences: false)
            guard groups.map(\.count) == [8, 4, 4, 4, 12] else {
                throw UUIDParseError(
                    input: text, reason: "a dashed UUID must have groups of 8-4-4-4-12 hex digits")
            }
            body = Substring(groups.joined())
        }

        var nibbles: [UInt8] = []
        nibbles.reserveCapacity(32)
        for character in body {
            guard let value = character.hexDigitValue, character.isASCII else {
                throw UUIDParseError(input: text, reason: "\"\(character)\" is not a hex digit")
            }
            nibbles.append(UInt8(value))
        }

        guard [4, 8, 32].contains(nibbles.count) else {
            throw UUIDParseError(
                input: text,
                reason: "expected 4 (16-bit), 8 (32-bit) or 32 (128-bit) hex digits, found \(nibbles.count)")
        }
        let parsed = stride(from: 0, to: nibbles.count, by: 2).map { nibbles[$0] << 4 | nibbles[$0 + 1] }
        switch nibbles.count {
        case 4: bytes = [0, 0] + parsed + Self.baseSuffix
        case 8: bytes = parsed + Self.baseSuffix
        default: bytes = parsed
        }
    }

    /// Nil when `bytes` is not 16 long.
    public init?(bytes: [UInt8]) {
        guard bytes.count == 16 else { return nil }
        self.bytes = bytes
    }

    /// The 16-bit value when this UUID is a base-UUID shorthand of that size.
    public var shortValue: UInt16? {
        guard bytes[0] == 0, bytes[1] == 0, Array(bytes[4...]) == Self.baseSuffix else { return nil }
        return UInt16(bytes[2]) << 8 | UInt16(bytes[3])
    }

    /// Lower-case dashed 128-bit form, as BlueZ reports UUIDs on D-Bus.
    public var canonical: String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        for (index, byte) in bytes.enumerated() {
            if index == 4 || index == 6 || index == 8 || index == 10 { text.append(UInt8(ascii: "-")) }
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }

    public var description: String { canonical }
}

/// Why a UUID from the user or a peer could not be parsed; one line naming the input.
public struct UUIDParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var input: String
    public var reason: String

    public var description: String { "invalid Bluetooth UUID \"\(input)\": \(reason)" }
}
