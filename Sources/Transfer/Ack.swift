/// The value a bletransfer central writes after it received a framed message and verified its
/// digest, so the sender learns which message arrived intact.
///
/// Layout (20 bytes, exactly the write size of the smallest ATT MTU):
/// `89 42 4C 54 41` ("\x89BLTA") · version 1 (1 byte) · session id (8 bytes, big-endian) ·
/// the first 6 bytes of the payload's SHA-256.
public struct Ack: Sendable, Hashable {
    public static let magic: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x41]
    public static let encodedLength = 20
    public static let digestPrefixLength = 6

    public var session: SessionID
    /// The first `digestPrefixLength` bytes of the acknowledged payload's SHA-256.
    public var digestPrefix: [UInt8]

    public init(session: SessionID, digest: [UInt8]) {
        self.session = session
        self.digestPrefix = Array(digest.prefix(Self.digestPrefixLength))
    }

    public init(acknowledging header: FramedHeader) {
        self.init(session: header.session, digest: header.digest)
    }

    public var encoded: [UInt8] {
        Self.magic + [WireFormat.framedVersion] + session.bytes + digestPrefix
    }

    /// Parses a value a central wrote; nil for anything that is not a well-formed version-1 ACK.
    public init?(parsing value: [UInt8]) {
        guard value.count == Self.encodedLength, value.starts(with: Self.magic),
            value[5] == WireFormat.framedVersion
        else { return nil }
        session = SessionID(bigEndianBytes: value[6..<14])
        digestPrefix = Array(value[14..<20])
    }

    /// True when this ACK names the session and payload digest of `header`.
    public func acknowledges(_ header: FramedHeader) -> Bool {
        session == header.session && header.digest.starts(with: digestPrefix)
            && digestPrefix.count == Self.digestPrefixLength
    }
}
