import Crypto
import Foundation

/// One side of `bletransfer pair` (docs/pairing.md): Noise XX between the hosts' identities, then numeric comparison
/// with commitments as LE Secure Connections does it, then each person's answer. Pure: the shell carries the messages
/// as L2CAP SDUs and asks the person. The initiator opened the channel. Messages, one SDU each:
///
///     I → R  PAIR magic "BLTPAIR" · version 2 · Noise message 1 (e)
///     R → I  Noise message 2 (e, ee, s, es)
///     I → R  Noise message 3 (s, se)          both now hold h, the handshake hash
///     R → I  sealed COMMIT  Cr = SHA-256("bletransfer pair commit" · h · Nr) · R's name
///     I → R  sealed NONCE   Ni · I's name
///     R → I  sealed REVEAL  Nr                 I checks Cr
///     both   d = SHA-256("bletransfer pair code" · h · Ni · Nr)
///            I shows code I = d[0..<8] mod 10⁶, R shows code R = d[8..<16] mod 10⁶
///     both   sealed ANSWER  01 (the person typed the other host's code) or 00
///
/// Numeric comparison made harder to wave through, as passkey entry is: each host shows a code and its person types
/// the *other* host's, so an answer proves the person read the other screen (a scripted `y` cannot). Both codes come
/// from one digest, so the commitments bind both.
///
/// Why commitments: a man in the middle runs one handshake with each host (h₁ ≠ h₂) and wants both codes equal;
/// without them he could try keys or nonces until they are (about 10⁶ tries, milliseconds). With them, as responder
/// he is bound to his nonce before seeing the initiator's, and as initiator he gives his before the responder's is
/// revealed: each code is uniformly random to him once he can no longer change it (one attempt: probability 10⁻⁶). He
/// may break off after the key exchange, before a code is typed: that is reported as possible interference.
package struct PairingExchange: Sendable {
    package enum Role: Sendable, Equatable {
        /// Opened the channel; writes Noise message 1 and the nonce.
        case initiator
        /// Accepted the channel; commits to its nonce first.
        case responder
    }

    /// The other host as the exchange proved it: its key, name and both codes.
    package struct Candidate: Sendable, Equatable {
        package var key: PeerKey
        /// Nil when it gave none, or one that cannot be written in an authorized-peers line.
        package var name: String?
        /// Six digits: what this host shows, for the other host's person to type.
        package var shownCode: String
        /// Six digits the other host shows, for this host's person to type. Never shown here: a
        /// person who could copy it from this screen would compare nothing.
        package var expectedCode: String

        /// "123 456": easier to read aloud and type.
        package var spacedShownCode: String { String(shownCode.prefix(3)) + " " + String(shownCode.suffix(3)) }

        /// `typed` is the other host's code: six digits, spaces and dashes allowed ("402 117", "402-117").
        package func isExpectedCode(_ typed: String) -> Bool {
            let digits = typed.unicodeScalars.filter { $0 != " " && $0 != "-" && $0 != "\t" }
            guard digits.count == 6, digits.allSatisfy({ ("0"..."9").contains($0) }) else { return false }
            return String(String.UnicodeScalarView(digits)) == expectedCode
        }
    }

    package enum Phase: Sendable, Equatable {
        case exchanging
        /// The code is known: ask the person (`answer`).
        case comparing(Candidate)
        case finished(Result)
    }

    package enum Result: Sendable, Equatable {
        /// Both people said the codes match: add `candidate`.
        case paired(Candidate)
        /// One side or both said no: add nothing.
        case declined(here: Bool, byPeer: Bool)
    }

    package static let magic: [UInt8] = Array("BLTPAIR".utf8)
    /// 2: each person types the other host's code (version 1 showed one code on both and asked for
    /// a yes); the two cannot pair, the version is refused.
    package static let version: UInt8 = 2
    /// The longest SDU (Noise message 2 is 96 bytes; a sealed NONCE with a 64-byte name about 120).
    package static let maximumMessageLength = 512
    /// Longest name sent; a longer one is cut (on a character boundary).
    package static let maximumNameBytes = 64

    package let role: Role
    package private(set) var phase: Phase = .exchanging

    private var handshake: NoiseXXHandshake
    private var sealer: RecordSealer?
    private var opener: RecordOpener?
    private let ownName: String?
    private let ownNonce: [UInt8]
    private var peerNonce: [UInt8]?
    private var peerName: String?
    private var peerCommitment: [UInt8]?
    private var handshakeHash: [UInt8] = []
    private var candidate: Candidate?
    private var ownAnswer: Bool?
    private(set) var peerAnswer: Bool?
    private var expecting: Expected
    private var started = false

    private enum Expected: Equatable {
        case pairHello, noise2, noise3, commit, nonce, reveal, answer, nothing
    }

    /// The sealed messages' first content byte.
    enum SealedKind: UInt8 {
        case commit = 1, nonce = 2, reveal = 3, answer = 4
    }

    static let prologue: [UInt8] = Array("bletransfer pair".utf8) + [version]
    static let commitLabel: [UInt8] = Array("bletransfer pair commit".utf8)
    static let codeLabel: [UInt8] = Array("bletransfer pair code".utf8)

    /// - Parameters:
    ///   - name: what this host calls itself (its identity's name).
    ///   - nonce: 32 random bytes; tests give their own.
    ///   - ephemeralKey: tests only.
    package init(role: Role, identity: HostIdentity, name: String?, nonce: [UInt8]? = nil,
                ephemeralKey: Curve25519.KeyAgreement.PrivateKey? = nil) {
        self.role = role
        ownName = name.map(Self.cut)
        ownNonce = nonce ?? Array(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) })
        handshake = NoiseXXHandshake(role: role == .initiator ? .initiator : .responder,
                                     staticKey: identity.privateKey, prologue: Self.prologue, ephemeralKey: ephemeralKey)
        expecting = role == .initiator ? .noise2 : .pairHello
    }

    /// The initiator's first message; nothing for the responder.
    package mutating func start() throws(PairingError) -> [[UInt8]] {
        guard !started else { throw .outOfOrder("started twice") }
        started = true
        guard role == .initiator else { return [] }
        let message1 = try Self.noise { () throws(NoiseError) in try handshake.writeMessage() }
        return [Self.magic + [Self.version] + message1]
    }

    /// `message` opens a pairing (magic and version): checked before a channel goes to a responder.
    package static func isPairingHello(_ message: [UInt8]) -> Bool {
        message.count > magic.count + 1 && Array(message.prefix(magic.count)) == magic && message[magic.count] == version
    }

    /// Takes one message from the peer; returns what to send back.
    package mutating func receive(_ message: [UInt8]) throws(PairingError) -> [[UInt8]] {
        guard message.count <= Self.maximumMessageLength else { throw .malformed("a message of \(message.count) bytes") }
        switch expecting {
        case .pairHello:
            guard Array(message.prefix(Self.magic.count)) == Self.magic, message.count > Self.magic.count else {
                throw .notPairing
            }
            let version = message[Self.magic.count]
            guard version == Self.version else { throw .unsupportedVersion(version) }
            started = true
            let reply = try Self.noise { () throws(NoiseError) in
                _ = try handshake.readMessage(Array(message.dropFirst(Self.magic.count + 1)))
                return try handshake.writeMessage()
            }
            expecting = .noise3
            return [reply]
        case .noise2:
            let reply = try Self.noise { () throws(NoiseError) in
                _ = try handshake.readMessage(message)
                return try handshake.writeMessage()
            }
            try finishHandshake()
            expecting = .commit
            return [reply]
        case .noise3:
            _ = try Self.noise { () throws(NoiseError) in try handshake.readMessage(message) }
            try finishHandshake()
            expecting = .nonce
            return [try seal(.commit, Self.commitment(hash: handshakeHash, nonce: ownNonce) + Self.encodedName(ownName))]
        case .commit:
            var body = try open(message, expecting: .commit)
            peerCommitment = try Self.take(32, from: &body)
            peerName = try Self.decodeName(body)
            expecting = .reveal
            return [try seal(.nonce, ownNonce + Self.encodedName(ownName))]
        case .nonce:
            var body = try open(message, expecting: .nonce)
            peerNonce = try Self.take(32, from: &body)
            peerName = try Self.decodeName(body)
            let reply = try seal(.reveal, ownNonce)
            try compare()
            return [reply]
        case .reveal:
            var body = try open(message, expecting: .reveal)
            let nonce = try Self.take(32, from: &body)
            guard body.isEmpty else { throw .malformed("bytes after the nonce") }
            guard let peerCommitment, Self.commitment(hash: handshakeHash, nonce: nonce) == peerCommitment else {
                throw .commitmentMismatch
            }
            peerNonce = nonce
            try compare()
            return []
        case .answer:
            let body = try open(message, expecting: .answer)
            guard body.count == 1, body[0] <= 1 else { throw .malformed("an answer that is neither yes nor no") }
            peerAnswer = body[0] == 1
            expecting = .nothing
            settle()
            return []
        case .nothing:
            throw .outOfOrder("a message after the answer")
        }
    }

    /// The person's answer (true: the codes match); returns the message carrying it.
    package mutating func answer(_ accepted: Bool) throws(PairingError) -> [[UInt8]] {
        guard case .comparing = phase, ownAnswer == nil else { throw .outOfOrder("an answer before the code is known") }
        ownAnswer = accepted
        let message = try seal(.answer, [accepted ? 1 : 0])
        settle()
        return [message]
    }

    /// The peer's key once the handshake proved it (before the code is compared: not yet trusted).
    package var peerKey: PeerKey? { handshake.remoteStaticKey }

    /// The key exchange finished: a pairing ending without both answers may then be someone in
    /// the middle breaking off before the codes are compared (docs/pairing.md).
    package var isPastKeyExchange: Bool { sealer != nil }

    // MARK: Steps

    private mutating func finishHandshake() throws(PairingError) {
        guard handshake.isComplete else { throw .outOfOrder("handshake not complete") }
        let keys = try Self.noise { () throws(NoiseError) in try handshake.transportKeys() }
        sealer = keys.sealer
        opener = keys.opener
        handshakeHash = handshake.handshakeHash
    }

    /// A handshake step, its failure reported as the pairing's.
    private static func noise<T>(_ step: () throws(NoiseError) -> T) throws(PairingError) -> T {
        do {
            return try step()
        } catch {
            throw .handshake(error)
        }
    }

    private mutating func compare() throws(PairingError) {
        guard let peerNonce, let key = handshake.remoteStaticKey else { throw .outOfOrder("no nonce or key") }
        let (initiatorNonce, responderNonce) = role == .initiator ? (ownNonce, peerNonce) : (peerNonce, ownNonce)
        let codes = Self.codes(hash: handshakeHash, initiatorNonce: initiatorNonce, responderNonce: responderNonce)
        let candidate = role == .initiator
            ? Candidate(key: key, name: peerName, shownCode: codes.initiator, expectedCode: codes.responder)
            : Candidate(key: key, name: peerName, shownCode: codes.responder, expectedCode: codes.initiator)
        self.candidate = candidate
        expecting = .answer
        phase = .comparing(candidate)
    }

    private mutating func settle() {
        guard let ownAnswer, let peerAnswer, let candidate else { return }
        phase = .finished(ownAnswer && peerAnswer ? .paired(candidate) : .declined(here: !ownAnswer, byPeer: !peerAnswer))
    }

    private mutating func seal(_ kind: SealedKind, _ body: [UInt8]) throws(PairingError) -> [UInt8] {
        guard var sealer else { throw .outOfOrder("a sealed message before the handshake") }
        defer { self.sealer = sealer }
        do {
            return try sealer.seal(Record(kind: .pairing, content: [kind.rawValue] + body))
        } catch {
            throw .record(error)
        }
    }

    private mutating func open(_ message: [UInt8], expecting kind: SealedKind) throws(PairingError) -> [UInt8] {
        guard var opener else { throw .outOfOrder("a sealed message before the handshake") }
        defer { self.opener = opener }
        var reader = FrameReader()
        let frames: [Frame]
        do {
            frames = try reader.append(message)
        } catch {
            throw .malformed("\(error)")
        }
        guard frames.count == 1, reader.bufferedByteCount == 0 else { throw .malformed("not one sealed record") }
        let record: Record
        do {
            record = try opener.open(frames[0])
        } catch {
            throw .record(error)
        }
        guard record.kind == .pairing, let first = record.content.first, let got = SealedKind(rawValue: first) else {
            throw .malformed("a record that is not part of a pairing")
        }
        guard got == kind else { throw .outOfOrder("\(got) where \(kind) was due") }
        return Array(record.content.dropFirst())
    }

    // MARK: Values

    static func commitment(hash: [UInt8], nonce: [UInt8]) -> [UInt8] {
        Array(SHA256.hash(data: commitLabel + hash + nonce))
    }

    /// Both codes: the initiator's from the digest's first 8 bytes, the responder's from the next
    /// 8, each big-endian modulo 10⁶, six digits with leading zeros.
    static func codes(hash: [UInt8], initiatorNonce: [UInt8], responderNonce: [UInt8]) -> (initiator: String, responder: String) {
        let digest = Array(SHA256.hash(data: codeLabel + hash + initiatorNonce + responderNonce))
        func sixDigits(_ bytes: ArraySlice<UInt8>) -> String {
            let value = bytes.reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000
            let digits = String(value)
            return String(repeating: "0", count: 6 - digits.count) + digits
        }
        return (sixDigits(digest[0..<8]), sixDigits(digest[8..<16]))
    }

    static func cut(_ name: String) -> String {
        var result = ""
        for character in name {
            guard result.utf8.count + character.utf8.count <= maximumNameBytes else { break }
            result.append(character)
        }
        // A cut that ends in a space would make the name one a key line cannot hold.
        return result.count < name.count ? result.trimmingCharacters(in: .whitespaces) : result
    }

    static func encodedName(_ name: String?) -> [UInt8] {
        let bytes = Array((name ?? "").utf8.prefix(maximumNameBytes))
        return [UInt8(bytes.count)] + bytes
    }

    /// A name the peer gave: nil when empty or not writable in a key line.
    static func decodeName(_ body: [UInt8]) throws(PairingError) -> String? {
        guard let length = body.first, body.count == 1 + Int(length), length <= maximumNameBytes else {
            throw .malformed("a name field that does not fit")
        }
        guard length > 0, let name = String(validating: body.dropFirst(), as: UTF8.self),
              AuthorizedPeersFile.isValidName(name)
        else { return nil }
        return name
    }

    static func take(_ count: Int, from body: inout [UInt8]) throws(PairingError) -> [UInt8] {
        guard body.count >= count else { throw .malformed("\(body.count) bytes where \(count) were due") }
        let taken = Array(body.prefix(count))
        body.removeFirst(count)
        return taken
    }
}

package enum PairingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The first message is not a pairing's: someone else opened the channel.
    case notPairing
    case unsupportedVersion(UInt8)
    case handshake(NoiseError)
    case record(RecordError)
    case malformed(String)
    case outOfOrder(String)
    /// The responder's nonce does not match its commitment (a man in the middle, or a broken peer): nothing added.
    case commitmentMismatch

    package var description: String {
        switch self {
        case .notPairing: return "the peer does not speak the pairing protocol"
        case .unsupportedVersion(let version): return "the peer speaks pairing version \(version), this host \(PairingExchange.version)"
        case .handshake(let error): return "key exchange failed: \(error)"
        case .record(let error): return "a pairing message failed: \(error)"
        case .malformed(let what): return "malformed pairing message: \(what)"
        case .outOfOrder(let what): return "pairing message out of order: \(what)"
        case .commitmentMismatch: return "the peer's nonce does not match its commitment (someone may be interfering)"
        }
    }
}
