import Crypto

/// The `Noise_XX_25519_ChaChaPoly_SHA256` handshake (Noise revision 34) as a pure state machine:
/// bytes in, bytes out, typed errors, no I/O and no clock.
///
/// ```
/// -> e
/// <- e, ee, s, es
/// -> s, se
/// ```
///
/// In framed version 2 the peripheral (sender) is the initiator (docs/wire-v2.md says why). The
/// caller checks ``remoteStaticKey`` against its authorized peers as soon as it is known (initiator:
/// after message 2, responder: after message 3), before sending anything more.
package struct NoiseXXHandshake: Sendable {
    package enum Role: Sendable, Equatable {
        case initiator, responder
    }

    package static let protocolName = "Noise_XX_25519_ChaChaPoly_SHA256"
    /// Noise's limit for any message.
    package static let maximumMessageLength = 65535
    static let keyLength = 32
    static let tagLength = NoiseCipherState.tagLength

    package let role: Role
    // Keys as raw bytes: Crypto's key types are not Sendable.
    private let localStaticBytes: [UInt8]
    private var localEphemeralBytes: [UInt8]?
    private var remoteEphemeralBytes: [UInt8]?
    package private(set) var remoteStaticKey: PeerKey?
    private(set) var symmetric: NoiseSymmetricState
    /// Messages processed so far (0…3); `failed` once any step threw.
    private var messagesDone = 0
    private var failed = false

    /// `prologue`: bytes both sides agree on (the HELLO and the stream prefix); a difference fails
    /// the handshake. `ephemeralKey`: for known-answer tests only.
    package init(
        role: Role, staticKey: Curve25519.KeyAgreement.PrivateKey, prologue: [UInt8],
        ephemeralKey: Curve25519.KeyAgreement.PrivateKey? = nil
    ) {
        self.role = role
        self.localStaticBytes = Array(staticKey.rawRepresentation)
        self.localEphemeralBytes = ephemeralKey.map { Array($0.rawRepresentation) }
        symmetric = NoiseSymmetricState(protocolName: Self.protocolName)
        symmetric.mixHash(prologue)
    }

    package var isOurTurnToWrite: Bool {
        !failed && messagesDone < 3 && (messagesDone % 2 == 0) == (role == .initiator)
    }

    package var isComplete: Bool { !failed && messagesDone == 3 }
    package var hasFailed: Bool { failed }

    /// The handshake hash, identical on both sides once complete (channel binding).
    package var handshakeHash: [UInt8] { symmetric.handshakeHash }

    /// The next handshake message, carrying `payload` (encrypted from message 2 on).
    package mutating func writeMessage(payload: [UInt8] = []) throws(NoiseError) -> [UInt8] {
        guard isOurTurnToWrite else { throw .outOfTurn }
        do throws(NoiseError) {
            let message = try writeTokens(payload: payload)
            guard message.count <= Self.maximumMessageLength else { throw NoiseError.tooLong(message.count) }
            messagesDone += 1
            return message
        } catch {
            failed = true
            throw error
        }
    }

    package mutating func readMessage(_ message: [UInt8]) throws(NoiseError) -> [UInt8] {
        guard !failed, messagesDone < 3, !isOurTurnToWrite else { throw .outOfTurn }
        do throws(NoiseError) {
            guard message.count <= Self.maximumMessageLength else { throw NoiseError.tooLong(message.count) }
            let payload = try readTokens(message)
            messagesDone += 1
            return payload
        } catch {
            failed = true
            throw error
        }
    }

    /// The remote static key's authorized-peers entry, once known (initiator: after message 2,
    /// responder: after message 3); else throws `unauthorizedPeer` and fails, so nothing more is written.
    package mutating func authorizeRemote(by peers: AuthorizedPeers) throws(NoiseError) -> AuthorizedPeers.Peer {
        guard !failed, let remoteStaticKey else { throw .outOfTurn }
        guard let peer = peers.peer(for: remoteStaticKey) else {
            failed = true
            throw .unauthorizedPeer(remoteStaticKey)
        }
        return peer
    }

    /// The two directions' record ciphers, once the handshake is complete.
    package func transportKeys(rekeyInterval: UInt64 = RecordSealer.defaultRekeyInterval) throws(NoiseError) -> (
        sealer: RecordSealer, opener: RecordOpener
    ) {
        guard isComplete else { throw .outOfTurn }
        let (initiatorToResponder, responderToInitiator) = symmetric.split()
        let (outgoing, incoming) = role == .initiator
            ? (initiatorToResponder, responderToInitiator) : (responderToInitiator, initiatorToResponder)
        return (RecordSealer(cipher: outgoing, rekeyInterval: rekeyInterval),
                RecordOpener(cipher: incoming, rekeyInterval: rekeyInterval))
    }

    // MARK: Tokens

    private static func dh(
        _ privateKey: Curve25519.KeyAgreement.PrivateKey, _ publicKey: Curve25519.KeyAgreement.PublicKey
    ) throws(NoiseError) -> [UInt8] {
        do {
            let secret = try privateKey.sharedSecretFromKeyAgreement(with: publicKey)
            let bytes = secret.withUnsafeBytes { Array($0) }
            // An all-zero result means a low-order point: the peer contributed nothing secret.
            guard bytes.contains(where: { $0 != 0 }) else { throw NoiseError.invalidPublicKey }
            return bytes
        } catch {
            throw .invalidPublicKey
        }
    }

    private mutating func writeEphemeral() -> [UInt8] {
        let ephemeral = localEphemeral ?? Curve25519.KeyAgreement.PrivateKey()
        localEphemeralBytes = Array(ephemeral.rawRepresentation)
        let bytes = Array(ephemeral.publicKey.rawRepresentation)
        symmetric.mixHash(bytes)
        return bytes
    }

    private mutating func readEphemeral(_ message: [UInt8], at offset: inout Int) throws(NoiseError) {
        let bytes = Array(message[offset..<offset + Self.keyLength])
        offset += Self.keyLength
        remoteEphemeralBytes = bytes
        symmetric.mixHash(bytes)
    }

    private mutating func readStatic(_ message: [UInt8], at offset: inout Int) throws(NoiseError) {
        let length = Self.keyLength + (symmetric.cipher.hasKey ? Self.tagLength : 0)
        let bytes = try symmetric.decryptAndHash(Array(message[offset..<offset + length]))
        offset += length
        remoteStaticKey = try? PeerKey(rawBytes: bytes)
        guard remoteStaticKey != nil else { throw .invalidPublicKey }
    }

    private var localStatic: Curve25519.KeyAgreement.PrivateKey {
        try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: localStaticBytes)  // 32 bytes of a valid key
    }

    private var localEphemeral: Curve25519.KeyAgreement.PrivateKey? {
        localEphemeralBytes.map { try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) }
    }

    private var ephemeral: Curve25519.KeyAgreement.PrivateKey {
        get throws(NoiseError) {
            guard let localEphemeral else { throw .outOfTurn }
            return localEphemeral
        }
    }

    private func remoteEphemeralKey() throws(NoiseError) -> Curve25519.KeyAgreement.PublicKey {
        guard let remoteEphemeralBytes,
            let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: remoteEphemeralBytes)
        else { throw .outOfTurn }
        return key
    }

    private func remoteStatic() throws(NoiseError) -> Curve25519.KeyAgreement.PublicKey {
        guard let remoteStaticKey else { throw .outOfTurn }
        return remoteStaticKey.publicKey
    }

    private mutating func writeTokens(payload: [UInt8]) throws(NoiseError) -> [UInt8] {
        var message: [UInt8] = []
        switch messagesDone {
        case 0:  // -> e
            message += writeEphemeral()
        case 1:  // <- e, ee, s, es   (we are the responder)
            message += writeEphemeral()
            symmetric.mixKey(try Self.dh(try ephemeral, try remoteEphemeralKey()))
            message += try symmetric.encryptAndHash(Array(localStatic.publicKey.rawRepresentation))
            symmetric.mixKey(try Self.dh(localStatic, try remoteEphemeralKey()))
        default:  // -> s, se   (we are the initiator)
            message += try symmetric.encryptAndHash(Array(localStatic.publicKey.rawRepresentation))
            symmetric.mixKey(try Self.dh(localStatic, try remoteEphemeralKey()))
        }
        message += try symmetric.encryptAndHash(payload)
        return message
    }

    /// Minimum length of message `index` (keys, tags, and the payload's tag once keyed).
    static func minimumLength(ofMessage index: Int) -> Int {
        switch index {
        case 0: return keyLength
        case 1: return keyLength + keyLength + tagLength + tagLength
        default: return keyLength + tagLength + tagLength
        }
    }

    private mutating func readTokens(_ message: [UInt8]) throws(NoiseError) -> [UInt8] {
        let needed = Self.minimumLength(ofMessage: messagesDone)
        guard message.count >= needed else { throw .truncated(needed: needed, got: message.count) }
        var offset = 0
        switch messagesDone {
        case 0:  // -> e   (we are the responder)
            try readEphemeral(message, at: &offset)
        case 1:  // <- e, ee, s, es   (we are the initiator)
            try readEphemeral(message, at: &offset)
            symmetric.mixKey(try Self.dh(try ephemeral, try remoteEphemeralKey()))
            try readStatic(message, at: &offset)
            symmetric.mixKey(try Self.dh(try ephemeral, try remoteStatic()))
        default:  // -> s, se   (we are the responder)
            try readStatic(message, at: &offset)
            symmetric.mixKey(try Self.dh(try ephemeral, try remoteStatic()))
        }
        return try symmetric.decryptAndHash(Array(message[offset...]))
    }
}
