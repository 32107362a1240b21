/// A GATT characteristic's property or permission as BlueZ names it in `GattCharacteristic1.Flags` (doc/gatt-api.txt,
/// BlueZ 5.66): remote characteristics report them, local ones declare them. An unknown flag stays as `.other`.
public enum GATTCharacteristicFlag: Hashable, Sendable {
    case broadcast, read, writeWithoutResponse, write, notify, indicate
    case authenticatedSignedWrites, extendedProperties, reliableWrite, writableAuxiliaries
    case encryptRead, encryptWrite, encryptAuthenticatedRead, encryptAuthenticatedWrite
    case secureRead, secureWrite, authorize
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

    public init(bluezName: String) {
        self = Self.byName[bluezName] ?? .other(bluezName)
    }

    public var bluezName: String {
        if case .other(let name) = self { return name }
        return Self.byName.first { $0.value == self }?.key ?? "\(self)"
    }
}
