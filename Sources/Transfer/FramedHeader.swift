import Crypto

/// The header a bletransfer peripheral sends before the payload when the central asked for the
/// framed format.
///
/// Layout (57 bytes, big-endian integers):
///
/// | offset | size | field                                               |
/// |-------:|-----:|-----------------------------------------------------|
/// |      0 |    8 | magic `89 42 4C 54 46 0D 0A 1A` ("\x89BLTF\r\n\x1A") |
/// |      8 |    1 | version, 1                                          |
/// |      9 |    8 | session id echoed from the central's HELLO          |
/// |     17 |    8 | payload length in bytes                             |
/// |     25 |   32 | SHA-256 of the payload                              |
///
/// The header is the start of a byte stream (header, then payload) that is cut into pieces,
/// each sent behind a 2-byte sequence number (see ``MessageSender``), so it may span several
/// values. The first value (sequence number 0) always carries the first 18 stream bytes
/// (magic, version and session id among them), which is all the receiver needs to tell
/// framed from compat.
public struct FramedHeader: Sendable, Hashable {
    /// 0x89 cannot start UTF-8 text, so no text payload is ever mistaken for a header.
    public static let magic: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A]
    public static let encodedLength = 57
    static let versionOffset = 8
    static let sessionOffset = 9
    static let lengthOffset = 17
    static let digestOffset = 25

    public var version: UInt8
    public var session: SessionID
    public var payloadLength: Int
    /// SHA-256 of the payload, 32 bytes.
    public var digest: [UInt8]

    public init(version: UInt8 = WireFormat.framedVersion, session: SessionID, payloadLength: Int, digest: [UInt8]) {
        self.version = version
        self.session = session
        self.payloadLength = payloadLength
        self.digest = digest
    }

    /// The header for `payload`, hashing it.
    public init(session: SessionID, payload: [UInt8]) {
        self.init(session: session, payloadLength: payload.count, digest: Self.sha256(payload))
    }

    public var encoded: [UInt8] {
        var bytes = Self.magic
        bytes.reserveCapacity(Self.encodedLength)
        bytes.append(version)
        bytes += session.bytes
        let length = UInt64(payloadLength)
        bytes += (0..<8).map { UInt8(truncatingIfNeeded: length >> (56 - 8 * $0)) }
        bytes += digest
        return bytes
    }

    /// Decodes a complete header (`bytes.count == encodedLength`) and checks it against the
    /// receiver's session and limits. Magic and version must already have been checked.
    static func decode(
        _ bytes: [UInt8], expectedSession: SessionID, limits: TransferLimits
    ) throws(ReceiveError) -> FramedHeader {
        let session = SessionID(bigEndianBytes: bytes[sessionOffset..<lengthOffset])
        guard session == expectedSession else {
            throw .sessionMismatch(expected: expectedSession, received: session)
        }
        let length = bytes[lengthOffset..<digestOffset].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard length <= UInt64(limits.maximumMessageSize) else {
            throw .announcedLengthExceedsLimit(announced: length, limit: limits.maximumMessageSize)
        }
        return FramedHeader(
            version: bytes[versionOffset], session: session, payloadLength: Int(length),
            digest: Array(bytes[digestOffset..<encodedLength]))
    }

    /// SHA-256 of `payload`, 32 bytes.
    public static func sha256(_ payload: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: payload))
    }
}
