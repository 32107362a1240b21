/// A GATT characteristic's property or permission as BlueZ names it in
/// `GattCharacteristic1.Flags` (doc/gatt-api.txt, BlueZ 5.66). Remote characteristics report
/// them; local ones declare them. A flag this build does not know stays readable as `.other`.
public enum GATTCharacteristicFlag: Hashable, Sendable {
    case broadcast
    case read
    case writeWithoutResponse
    case write
    case notify
    case indicate
    case authenticatedSignedWrites
    case extendedProperties
    case reliableWrite
    case writableAuxiliaries
    case encryptRead
    case encryptWrite
    case encryptAuthenticatedRead
    case encryptAuthenticatedWrite
    case secureRead
    case secureWrite
    case authorize
    case other(String)

    private static let byName: [String: GATTCharacteristicFlag] = [
        "broadcast": .broadcast, "read": .read, "write-without-response": .writeWithoutResponse,
        "write": .write, "notify": .notify, "indicate": .indicate,
        "authenticated-signed-writes": .authenticatedSignedWrites,
        "extended-properties": .extendedProperties, "reliable-write": .reliableWrite,
        "writable-auxiliaries": .writableAuxiliaries, "encrypt-read": .encryptRead,
        "encrypt-write": .encryptWrite, "encrypt-authenticated-read": .encryptAuthenticatedRead,
        "encrypt-authenticated-write": .encryptAuthenticatedWrite, "secure-read": .secureRead,
        "secure-write": .secureWrite, "authorize": .authorize,
    ]

    private static let names: [GATTCharacteristicFlag: String] = Dictionary(
        uniqueKeysWithValues: byName.map { ($0.value, $0.key) })

    /// The flag BlueZ's name stands for ("write-without-response" → `.writeWithoutResponse`).
    public init(bluezName: String) {
        self = Self.byName[bluezName] ?? .other(bluezName)
    }

    /// The name BlueZ uses for this flag.
    public var bluezName: String {
        if case .other(let name) = self { return name }
        return Self.names[self] ?? "\(self)"
    }
}
