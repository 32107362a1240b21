/// Framed version 2's negotiation (docs/wire-v2.md, section 1): capabilities, HELLO v2, stream
/// prefix, and the prologue binding both, so an attacker who edits either offer fails the handshake.
package struct Capabilities: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    /// Noise XX handshake, every later byte in sealed records.
    package static let secure = Capabilities(rawValue: 1 << 0)
    /// Several messages per session.
    package static let multi = Capabilities(rawValue: 1 << 1)
    /// A message continues from the receiver's checkpoint.
    package static let resume = Capabilities(rawValue: 1 << 2)
    /// File name and modification time in the message header.
    package static let meta = Capabilities(rawValue: 1 << 3)
    /// With `multi`: the next message may start before the last one's ACK (two unacknowledged at most).
    package static let pipeline = Capabilities(rawValue: 1 << 4)
    /// The receiver reports what it holds (PROGRESS); at most `FlowWindow.bytes` beyond it in flight.
    package static let window = Capabilities(rawValue: 1 << 5)
    /// Over an LE credit-based L2CAP channel, not GATT: SDUs up to 8 KiB (`SequencedStream.channelValueLengths`),
    /// never reordered. Offered only in a HELLO sent on such a channel, and chosen exactly then.
    package static let channel = Capabilities(rawValue: 1 << 6)

    /// Every capability this build understands; other bits are cleared on receipt.
    package static let known: Capabilities = [.secure, .multi, .resume, .meta, .pipeline, .window, .channel]

    var bytes: [UInt8] { bigEndian(rawValue) }

    init(bigEndian bytes: ArraySlice<UInt8>) {
        rawValue = bytes.reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }
}

/// The central's HELLO v2 (18 bytes): `89 42 4C 54 48 | 02 | session id (8) | capabilities (4)`;
/// the retired version 1's HELLO differs in the version byte (`RetiredVersion1`).
package struct HelloV2: Sendable, Hashable {
    package static let magic: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x48]
    package static let version: UInt8 = 2
    package static let encodedLength = 18

    /// The session id's 8 bytes, big-endian.
    package let session: UInt64
    /// What the HELLO offers that this build knows (unknown bits cleared).
    package let offered: Capabilities
    /// The HELLO's bytes as written, unknown bits and later versions' fields included: the
    /// prologue binds them, so editing a bit the parser ignores still fails the handshake.
    package let written: [UInt8]

    package init(session: UInt64, offered: Capabilities) {
        self.session = session
        self.offered = offered
        written = Self.magic + [Self.version] + bigEndian(session) + offered.bytes
    }

    /// The bytes this central writes (equal to `written` for a HELLO it made).
    package var encoded: [UInt8] { written }

    /// Nil unless a HELLO of version 2 or later, at least 18 bytes (later fields ignored); unknown bits are cleared.
    package init?(parsing value: [UInt8]) {
        guard value.count >= Self.encodedLength, value.starts(with: Self.magic), value[5] >= Self.version else {
            return nil
        }
        session = value[6..<14].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        offered = Capabilities(bigEndian: value[14..<18]).intersection(.known)
        written = value
    }
}

/// The first 21 bytes of a version-2 stream: `89 42 4C 54 46 0D 0A 1A | 02 | session id (8) |
/// chosen capabilities (4)`; its first 17 bytes sit where version 1's magic, version and session id did.
package struct StreamPrefix: Sendable, Hashable {
    package static let magic: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A]
    package static let encodedLength = 21

    package var session: UInt64
    package var chosen: Capabilities

    /// The peripheral's answer to `hello`: what both offer, limited to what it `supports`.
    package init(answering hello: HelloV2, supports: Capabilities) {
        session = hello.session
        chosen = hello.offered.intersection(supports).intersection(.known)
    }

    package var encoded: [UInt8] { Self.magic + [HelloV2.version] + bigEndian(session) + chosen.bytes }

    package enum ParseError: Error, Sendable, Equatable, CustomStringConvertible {
        case notVersion2
        case sessionMismatch
        /// The peripheral chose something the central did not offer.
        case notOffered(Capabilities)

        package var description: String {
            switch self {
            case .notVersion2: return "not a framed version 2 stream"
            case .sessionMismatch: return "stream for another session"
            case .notOffered(let extra): return "peer chose capabilities never offered (\(extra.rawValue))"
            }
        }
    }

    /// Checks the first 21 stream bytes against the HELLO this central wrote.
    package init(parsing bytes: [UInt8], hello: HelloV2) throws(ParseError) {
        guard bytes.count >= Self.encodedLength, bytes.starts(with: Self.magic), bytes[8] == HelloV2.version else {
            throw .notVersion2
        }
        let session = bytes[9..<17].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard session == hello.session else { throw .sessionMismatch }
        let chosen = Capabilities(bigEndian: bytes[17..<21])
        guard chosen.isSubset(of: hello.offered) else { throw .notOffered(chosen.subtracting(hello.offered)) }
        self.session = session
        self.chosen = chosen
    }

    /// Noise prologue: `"bletransfer framed v2"`, the HELLO's bytes as written or read (not re-encoded), the prefix.
    package static func prologue(hello: HelloV2, prefix: StreamPrefix) -> [UInt8] {
        Array("bletransfer framed v2".utf8) + hello.written + prefix.encoded
    }
}

/// The `window` capability's numbers (docs/wire-v2.md, section 4).
package enum FlowWindow {
    /// Payload bytes the sender may have sent beyond the receiver's last report (PROGRESS or
    /// RESUME; 0 at the HEADER): bounds what a cut link loses, instead of every queue between.
    package static let bytes = 64 * 1024
    /// The receiver writes PROGRESS once it holds this much more than last reported. At most
    /// `bytes` minus one DATA record, so a sender stopped at its window always gets a report.
    package static let reportInterval = 16 * 1024
}
