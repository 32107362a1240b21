@testable import DBus
import PropertyBased
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Offline: values are appended to a message built in-process, read back, and pushed through
/// libdbus's wire format; no bus involved.
@Suite struct MarshallingTests {
    func message() throws -> Message {
        try Message.signal(path: "/test", interface: "org.example.Test", member: "Values")
    }

    func roundTrip(_ values: [DBusValue]) throws -> [DBusValue] {
        let original = try message()
        try original.append(values)
        #expect(original.signatureString == values.map(\.signature.rawValue).joined())
        let wire = try original.marshalled()
        return try Message.demarshal(wire).arguments()
    }

    @Test func randomValuesSurviveTheWireFormat() async {
        await propertyCheck(count: 500, input: RandomValues.arguments) { values in
            let decoded = try roundTrip(values)
            #expect(decoded == values)
        }
    }

    @Test func everyBasicTypeAtItsLimits() throws {
        let values: [DBusValue] = [
            .byte(0), .byte(255), .boolean(true), .boolean(false),
            .int16(.min), .int16(.max), .uint16(.max), .int32(.min), .int32(.max), .uint32(.max),
            .int64(.min), .int64(.max), .uint64(.max), .double(-0.0), .double(.infinity),
            .double(.greatestFiniteMagnitude), .string(""), .string("héllo \u{1F600} \u{FFFF}"),
            .objectPath(.root), .objectPath("/org/bluez/hci0"), .signature(""), .signature("a{oa{sa{sv}}}"),
        ]
        #expect(try roundTrip(values) == values)
    }

    @Test func nanKeepsItsBits() throws {
        let decoded = try roundTrip([.double(.nan)])
        #expect(decoded.first?.double?.isNaN == true)
    }

    @Test func blueZShapes() throws {
        let managed: ManagedObjects = [
            "/org/bluez/hci0": [
                "org.bluez.Adapter1": [
                    "Address": .string("00:11:22:33:44:55"), "Powered": .boolean(true),
                    "UUIDs": .strings(["0000180a-0000-1000-8000-00805f9b34fb"]),
                ],
                "org.freedesktop.DBus.Properties": [:],
            ],
            "/org/bluez/hci0/dev_AA": [
                "org.bluez.Device1": [
                    "RSSI": .int16(-60), "ManufacturerData": .dictionary(
                        key: "q", value: "v", [DBusDictionaryEntry(key: .uint16(76), value: .variant(.bytes([1, 2, 3])))]),
                    "Adapter": .objectPath("/org/bluez/hci0"),
                ]
            ],
        ]
        let decoded = try roundTrip([.managedObjects(managed), .vardict(["MTU": .uint16(517)])])
        #expect(decoded[0].signature == "a{oa{sa{sv}}}")
        #expect(decoded[0].managedObjects == managed)
        #expect(decoded[1].vardict?["MTU"]?.uint16 == 517)
    }

    @Test func nestedVariants() throws {
        var value = DBusValue.string("core")
        for _ in 0..<64 { value = .variant(value) }
        let decoded = try roundTrip([value])
        #expect(decoded == [value])
        #expect(decoded[0].unwrappedVariant == .string("core"))
        #expect(DBusValue.variant(.variant(.string("x"))).string == nil)  // accessors look through one level
        #expect(DBusValue.variant(.string("x")).string == "x")
    }

    @Test func emptyContainersKeepTheirTypes() throws {
        let values: [DBusValue] = [
            .array(element: "a{sv}", []), .dictionary(key: "o", value: "a{sa{sv}}", []), .bytes([]),
        ]
        let decoded = try roundTrip(values)
        #expect(decoded == values)
        #expect(decoded.map(\.signature.rawValue) == ["aa{sv}", "a{oa{sa{sv}}}", "ay"])
    }

    @Test func largeByteArray() throws {
        let bytes = (0..<200_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        #expect(try roundTrip([.bytes(bytes)]).first?.bytes == bytes)
    }

    // MARK: Rejected before libdbus sees them (libdbus would abort the process)

    @Test(arguments: [
        ("array element of another type", DBusValue.array(element: "s", [.int32(1)])),
        ("dictionary value of another type", .dictionary(key: "s", value: "v", [DBusDictionaryEntry(key: .string("k"), value: .string("v"))])),
        ("dictionary key of another type", .dictionary(key: "s", value: "i", [DBusDictionaryEntry(key: .int32(1), value: .int32(1))])),
        ("container dictionary key", .dictionary(key: "ay", value: "i", [])),
        ("variant dictionary key", .dictionary(key: "v", value: "i", [])),
        ("empty struct", .structure([])),
        ("string with NUL", .string("a\0b")),
        ("string with NUL inside a variant", .variant(.array(element: "s", [.string("\0")]))),
        ("array of two types", .array(element: "ii", [])),
    ])
    func malformedValuesAreRejected(_ label: String, _ value: DBusValue) throws {
        let message = try message()
        #expect(throws: DBusError.self, "\(label)") { try message.append([value]) }
    }

    @Test func tooDeepNestingIsRejected() throws {
        var arrays = DBusValue.int32(1)
        for _ in 0..<33 { arrays = .array(element: arrays.signature, [arrays]) }
        #expect(throws: DBusError.self) { try message().append([arrays]) }

        var structs = DBusValue.int32(1)
        for _ in 0..<33 { structs = .structure([structs]) }
        #expect(throws: DBusError.self) { try message().append([structs]) }

        var variants = DBusValue.int32(1)
        for _ in 0..<65 { variants = .variant(variants) }
        // Right at the limits, libdbus accepts what we send.
        var deepest = DBusValue.int32(1)
        for _ in 0..<32 { deepest = .array(element: deepest.signature, [deepest]) }
        for _ in 0..<32 { deepest = .variant(deepest) }
        #expect(try roundTrip([deepest]) == [deepest])
        var deepStructs = DBusValue.int32(1)
        for _ in 0..<32 { deepStructs = .structure([deepStructs]) }
        for _ in 0..<32 { deepStructs = .variant(deepStructs) }
        #expect(try roundTrip([deepStructs]) == [deepStructs])
        #expect(throws: DBusError.self) { try message().append([variants]) }

        var mixed = DBusValue.int32(1)
        for level in 0..<50 { mixed = level.isMultiple(of: 2) ? .variant(.array(element: mixed.signature, [mixed])) : .structure([mixed]) }
        #expect(throws: DBusError.self) { try message().append([mixed]) }
    }

    @Test func closedFileDescriptorIsRejected() throws {
        let fd = UnixFileDescriptor(owning: dup(0))
        fd.close()
        #expect(throws: DBusError.self) { try message().append([.unixFD(fd)]) }
    }

    @Test func invalidNamesAreRejected() throws {
        #expect(throws: DBusError.self) { try Message.signal(path: "/a", interface: "no_dots", member: "M") }
        #expect(throws: DBusError.self) { try Message.signal(path: "/a", interface: "org.example.I", member: "bad.member") }
        #expect(throws: DBusError.self) {
            try Message.methodCall(destination: "not a name", path: "/a", interface: nil, method: "M")
        }
    }

    @Test func invalidSignaturesAndPaths() {
        for text in ["a", "(", "{sv}", "a{vs}", "()", "z", String(repeating: "a", count: 33) + "i", "a\0i"] {
            #expect(Signature(rawValue: text) == nil, "\(text)")
        }
        for text in ["", "a", "/a/", "//", "/a//b", "/a-b", "/ä", "/a\0"] {
            #expect(ObjectPath(rawValue: text) == nil, "\(text)")
        }
    }

    // MARK: Unix fds (offline: libdbus dups on append and on read)

    @Test func fileDescriptorRoundTripReadsTheSamePipe() throws {
        var ends: [Int32] = [0, 0]
        #expect(pipe(&ends) == 0)
        let readEnd = UnixFileDescriptor(owning: ends[0])
        let writeEnd = UnixFileDescriptor(owning: ends[1])
        let message = try message()
        try message.append([.unixFD(readEnd)])
        readEnd.close()  // the message holds its own dup
        let received = try message.arguments()[0].unixFD!
        #expect(received.rawValue != nil)
        let text = Array("through the fd".utf8)
        #expect(write(writeEnd.rawValue!, text, text.count) == text.count)
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(received.rawValue!, &buffer, buffer.count)
        #expect(Array(buffer.prefix(max(0, count))) == text)
        let raw = received.rawValue!
        received.close()
        #expect(fcntl(raw, F_GETFD) == -1)  // closed by its owner
    }

    @Test func takenFileDescriptorIsNotClosed() {
        let raw = dup(0)
        let owner = UnixFileDescriptor(owning: raw)
        #expect(owner.take() == raw)
        #expect(owner.rawValue == nil)
        owner.close()
        #expect(fcntl(raw, F_GETFD) != -1)
        close(raw)
    }

    // MARK: Malformed bytes from the outside

    @Test func mutatedWireBytesAreRejectedOrReadSafely() async {
        let mutations = Generator<([DBusValue], UInt64), Shrink.None<([DBusValue], UInt64)>> { rng in
            let count = Int.random(in: 1...4, using: &rng)
            let values = (0..<count).map { _ in RandomValues.value(depth: 3, using: &rng) }
            return (values, UInt64.random(in: .min ... .max, using: &rng))
        }
        var rejected = 0
        var accepted = 0
        await propertyCheck(count: 2000, input: mutations) { values, seed in
            let original = try message()
            try original.append(values)
            var bytes = try original.marshalled()
            var rng = SeededGenerator(seed: seed)
            switch rng.next() % 4 {
            case 0:  // flip bytes
                for _ in 0..<(1 + Int(rng.next() % 4)) {
                    bytes[Int(rng.next() % UInt64(bytes.count))] ^= UInt8(truncatingIfNeeded: rng.next() | 1)
                }
            case 1:  // truncate
                bytes = Array(bytes.prefix(Int(rng.next() % UInt64(bytes.count))))
            case 2:  // grow a length or count field
                let index = Int(rng.next() % UInt64(bytes.count))
                bytes[index] = 0xFF
            default:  // pure noise with a plausible header start
                bytes = (0..<Int(rng.next() % 200)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                if bytes.count > 4 { bytes[0] = UInt8(ascii: "l"); bytes[3] = 1 }
            }
            do {
                let parsed = try Message.demarshal(bytes)
                _ = try? parsed.arguments()  // anything libdbus accepted must be readable without a crash
                accepted += 1
            } catch let error as DBusError {
                #expect(!error.name.isEmpty)
                rejected += 1
            }
        }
        #expect(rejected > 0)
    }

    @Test func emptyAndTinyInputsAreRejected() {
        #expect(throws: DBusError.self) { try Message.demarshal([]) }
        #expect(throws: DBusError.self) { try Message.demarshal([0x6c]) }
        #expect(throws: DBusError.self) { try Message.demarshal([UInt8](repeating: 0, count: 16)) }
    }
}

extension DBusValue {
    /// `self` with all variant layers removed.
    fileprivate var unwrappedVariant: DBusValue {
        var value = self
        while case .variant(let inner) = value { value = inner }
        return value
    }
}
