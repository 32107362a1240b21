import Crypto

/// Errors of the handshake and the record layer; after any, the handshake or direction is dead.
package enum NoiseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A message shorter than its pattern requires (`needed` bytes, `got` bytes).
    case truncated(needed: Int, got: Int)
    /// A message or record longer than the protocol allows.
    case tooLong(Int)
    /// Authentication failed: tampered, replayed, reordered or encrypted under another key.
    case authenticationFailed
    /// A public key that yields no shared secret (a low-order point).
    case invalidPublicKey
    /// write/read called out of turn, or after the handshake finished or failed.
    case outOfTurn
    /// The nonce counter would reach its reserved maximum.
    case nonceExhausted
    /// The peer's static key is not in the authorized-peers file.
    case unauthorizedPeer(PeerKey)

    package var description: String {
        switch self {
        case .truncated(let needed, let got): return "handshake message of \(got) bytes, at least \(needed) needed"
        case .tooLong(let length): return "message of \(length) bytes, over the limit"
        case .authenticationFailed: return "authentication failed (tampered, replayed, reordered or wrong key)"
        case .invalidPublicKey: return "invalid public key"
        case .outOfTurn: return "message out of turn"
        case .nonceExhausted: return "nonce counter exhausted"
        case .unauthorizedPeer(let key): return "peer key \(key.fingerprint) is not authorized"
        }
    }
}

/// Noise's CipherState for ChaChaPoly: a key and a 64-bit counter as nonce (`00 00 00 00 | counter
/// LE`), never sent: records open only in sealing order, so replays and reordering fail.
struct NoiseCipherState: Sendable {
    static let tagLength = 16
    /// Noise reserves 2^64 − 1 for rekeying.
    static let maximumNonce = UInt64.max

    /// Raw key bytes rather than a SymmetricKey, which is not Sendable.
    private(set) var keyBytes: [UInt8]?
    private(set) var nonce: UInt64 = 0

    init(key: [UInt8]? = nil) {
        self.keyBytes = key
    }

    var hasKey: Bool { keyBytes != nil }
    private var key: SymmetricKey? { keyBytes.map { SymmetricKey(data: $0) } }

    static func nonceBytes(_ counter: UInt64) -> ChaChaPoly.Nonce {
        var bytes = [UInt8](repeating: 0, count: 12)
        for index in 0..<8 { bytes[4 + index] = UInt8(truncatingIfNeeded: counter >> (8 * UInt64(index))) }
        return try! ChaChaPoly.Nonce(data: bytes)  // 12 bytes, always valid
    }

    /// Without a key, returns the plaintext (Noise's handshake before the first DH).
    mutating func encrypt(associatedData: [UInt8], plaintext: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard let key else { return plaintext }
        guard nonce < Self.maximumNonce else { throw .nonceExhausted }
        let box: ChaChaPoly.SealedBox
        do {
            box = try ChaChaPoly.seal(plaintext, using: key, nonce: Self.nonceBytes(nonce), authenticating: associatedData)
        } catch {
            throw .authenticationFailed  // sealing only fails on a malformed key, which cannot happen here
        }
        nonce += 1
        return Array(box.ciphertext) + Array(box.tag)
    }

    /// The counter advances only when the ciphertext opens: a forged record changes nothing
    /// (callers still end the session on the first failure).
    mutating func decrypt(associatedData: [UInt8], ciphertext: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard let key else { return ciphertext }
        guard nonce < Self.maximumNonce else { throw .nonceExhausted }
        guard ciphertext.count >= Self.tagLength else {
            throw .truncated(needed: Self.tagLength, got: ciphertext.count)
        }
        do {
            let box = try ChaChaPoly.SealedBox(
                nonce: Self.nonceBytes(nonce), ciphertext: ciphertext.dropLast(Self.tagLength),
                tag: ciphertext.suffix(Self.tagLength))
            let plaintext = try ChaChaPoly.open(box, using: key, authenticating: associatedData)
            nonce += 1
            return Array(plaintext)
        } catch {
            throw .authenticationFailed
        }
    }

    /// Noise's `Rekey()`: the new key is 32 zero bytes encrypted at the maximum nonce (first 32); the counter runs on.
    mutating func rekey() {
        guard let key else { return }
        let box = try! ChaChaPoly.seal(  // valid key and nonce: cannot fail
            [UInt8](repeating: 0, count: 32), using: key, nonce: Self.nonceBytes(Self.maximumNonce),
            authenticating: [UInt8]())
        keyBytes = Array(box.ciphertext.prefix(32))
    }
}

/// Noise's SymmetricState over SHA-256: chaining key, handshake hash and the current cipher.
struct NoiseSymmetricState: Sendable {
    private(set) var chainingKey: [UInt8]
    private(set) var handshakeHash: [UInt8]
    private(set) var cipher = NoiseCipherState()

    init(protocolName: String) {
        let name = Array(protocolName.utf8)
        let hash = name.count <= 32 ? name + [UInt8](repeating: 0, count: 32 - name.count) : Self.sha256(name)
        handshakeHash = hash
        chainingKey = hash
    }

    static func sha256(_ bytes: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: bytes)) }

    static func hmac(key: [UInt8], _ data: [UInt8]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: data, using: SymmetricKey(data: key)))
    }

    /// Noise's HKDF with two outputs: HKDF-SHA256 (RFC 5869), chaining key as salt, no info;
    /// written out because Noise names the two 32-byte halves separately.
    static func hkdf(chainingKey: [UInt8], inputKeyMaterial: [UInt8]) -> ([UInt8], [UInt8]) {
        let temporaryKey = hmac(key: chainingKey, inputKeyMaterial)
        let first = hmac(key: temporaryKey, [0x01])
        let second = hmac(key: temporaryKey, first + [0x02])
        return (first, second)
    }

    mutating func mixHash(_ data: [UInt8]) {
        handshakeHash = Self.sha256(handshakeHash + data)
    }

    mutating func mixKey(_ inputKeyMaterial: [UInt8]) {
        let (nextChainingKey, key) = Self.hkdf(chainingKey: chainingKey, inputKeyMaterial: inputKeyMaterial)
        chainingKey = nextChainingKey
        cipher = NoiseCipherState(key: key)
    }

    mutating func encryptAndHash(_ plaintext: [UInt8]) throws(NoiseError) -> [UInt8] {
        let ciphertext = try cipher.encrypt(associatedData: handshakeHash, plaintext: plaintext)
        mixHash(ciphertext)
        return ciphertext
    }

    mutating func decryptAndHash(_ ciphertext: [UInt8]) throws(NoiseError) -> [UInt8] {
        let plaintext = try cipher.decrypt(associatedData: handshakeHash, ciphertext: ciphertext)
        mixHash(ciphertext)
        return plaintext
    }

    /// The two transport cipher states: initiator → responder first.
    func split() -> (NoiseCipherState, NoiseCipherState) {
        let (first, second) = Self.hkdf(chainingKey: chainingKey, inputKeyMaterial: [])
        return (NoiseCipherState(key: first), NoiseCipherState(key: second))
    }
}
