/// The value a bletransfer central writes (write-without-response) before it subscribes, to
/// ask the peripheral for the framed format.
///
/// Layout (14 bytes, fits the 20-byte write of the smallest ATT MTU):
/// `89 42 4C 54 48` ("\x89BLTH") · version (1 byte) · session id (8 bytes, big-endian).
/// The version is the highest framed version the central understands; a peripheral answers
/// with a version no higher than it. A HELLO with a version above 1 may carry further bytes,
/// which this version ignores; a version-1 HELLO is exactly 14 bytes.
public struct Hello: Sendable, Hashable {
    public static let magic: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x48]
    public static let encodedLength = 14

    public var version: UInt8
    public var session: SessionID

    public init(version: UInt8 = WireFormat.framedVersion, session: SessionID) {
        self.version = version
        self.session = session
    }

    public var encoded: [UInt8] {
        Self.magic + [version] + session.bytes
    }

    /// Parses a value a central wrote; nil for anything that is not a well-formed HELLO.
    public init?(parsing value: [UInt8]) {
        guard value.count >= Self.encodedLength, value.starts(with: Self.magic) else { return nil }
        let version = value[5]
        guard version >= 1 else { return nil }
        if version == 1 && value.count != Self.encodedLength { return nil }
        self.version = version
        self.session = SessionID(bigEndianBytes: value[6..<14])
    }
}
