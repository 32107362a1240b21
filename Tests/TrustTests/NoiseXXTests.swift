import Crypto
import PropertyBased
import Testing

@testable import Trust

/// Known answers from an independent implementation (Python `noiseprotocol` 0.3.1), produced by
/// Tests/TrustTests/noise-vectors.py with the keys, prologue and payloads below.
enum NoiseVectors {
    static let initiatorStatic = [UInt8](0x00..<0x20)
    static let initiatorEphemeral = [UInt8](0x20..<0x40)
    static let responderStatic = [UInt8](0x01..<0x21)
    static let responderEphemeral = [UInt8](0x41..<0x61)
    static let prologue = Array("bletransfer framed v2".utf8)
    static let payloads = [[UInt8](), Array("responder says hi".utf8), Array("initiator's payload".utf8)]
    static let messages = [
        "358072d6365880d1aeea329adf9121383851ed21a28e3b75e965d0d2cd166254",
        "64b101b1d0be5a8704bd078f9895001fc03e8e9f9522f188dd128d9846d484663414af878d3e46a2f58911a816d6e8346d4ea17a6f2a0bb4ef4ed56c133cff45467736a7e05046aafdafa81f5d880b32f30cbca6264b2dc746dd5b5d0c5c7335c1865e17bde2a864249ea2d2309839cf6c",
        "87f864c11ba449f46a0a4f4e2eacbb7b0457784f4fca1937f572c93603e9c4d924d305fb02cc6d23f3dccb73fe40011b61786da2c2f513430219111e2cf3de8c73305f7614e054001e1f7cad203c28df0b509d",
    ].map { [UInt8](hex: $0) }
    static let handshakeHash = [UInt8](hex: "6e04dd493422b9f487ceed9260a6d296c0172ae0ed23d3194d461c57e0c6a941")
    static let transportPlaintexts = [Array("first record".utf8), Array("second record".utf8)]
    static let initiatorTransport = [
        "ba22ee34bd5913796c1f78886b96779a8b9008108de9174e7c34afd7",
        "ad23db71a65706ed70f437878eb05d240bafcb7cde66ee0a3a913517af",
    ].map { [UInt8](hex: $0) }
    static let responderTransport = [
        "3159ba5d9bef7f9987d021c45b3a91eb811c542ccff4475091c90961",
        "fb98bb600633fb21102d232f2e795702be14bfa9ae955f4d1905b1f86e",
    ].map { [UInt8](hex: $0) }

    static func initiator() -> NoiseXXHandshake {
        NoiseXXHandshake(
            role: .initiator, staticKey: privateKey(initiatorStatic), prologue: prologue,
            ephemeralKey: privateKey(initiatorEphemeral))
    }

    static func responder() -> NoiseXXHandshake {
        NoiseXXHandshake(
            role: .responder, staticKey: privateKey(responderStatic), prologue: prologue,
            ephemeralKey: privateKey(responderEphemeral))
    }
}

@Suite struct NoiseXXTests {
    @Test("writes and reads the known answers", arguments: [NoiseXXHandshake.Role.initiator, .responder])
    func knownAnswers(role: NoiseXXHandshake.Role) throws {
        let isInitiator = role == .initiator
        var handshake = isInitiator ? NoiseVectors.initiator() : NoiseVectors.responder()
        let peerStatic = isInitiator ? NoiseVectors.responderStatic : NoiseVectors.initiatorStatic
        for (index, message) in NoiseVectors.messages.enumerated() {
            // The initiator writes messages 1 and 3 of XX, the responder message 2.
            if isInitiator == index.isMultiple(of: 2) {
                #expect(try handshake.writeMessage(payload: NoiseVectors.payloads[index]) == message)
            } else {
                #expect(try handshake.readMessage(message) == NoiseVectors.payloads[index])
                // Messages 2 and 3 carry the sender's static key.
                if index > 0 { #expect(handshake.remoteStaticKey == PeerKey(privateKey(peerStatic).publicKey)) }
            }
        }
        #expect(handshake.isComplete)
        #expect(handshake.handshakeHash == NoiseVectors.handshakeHash)

        // The first cipher state is the initiator's sending one.
        let (initiatorToResponder, responderToInitiator) = try #require(handshake.splitCipherStates())
        var (send, receive) = isInitiator
            ? (initiatorToResponder, responderToInitiator) : (responderToInitiator, initiatorToResponder)
        let (sent, received) = isInitiator
            ? (NoiseVectors.initiatorTransport, NoiseVectors.responderTransport)
            : (NoiseVectors.responderTransport, NoiseVectors.initiatorTransport)
        for (plaintext, expected) in zip(NoiseVectors.transportPlaintexts, sent) {
            #expect(try send.encrypt(associatedData: [], plaintext: plaintext) == expected)
        }
        for (plaintext, ciphertext) in zip(NoiseVectors.transportPlaintexts, received) {
            #expect(try receive.decrypt(associatedData: [], ciphertext: ciphertext) == plaintext)
        }
    }

    @Test func messageSizesMatchTheDesign() throws {
        // docs/wire-v2.md: 32, 96 and 64 bytes with empty payloads.
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: [])
        var responder = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: [])
        let first = try initiator.writeMessage()
        _ = try responder.readMessage(first)
        let second = try responder.writeMessage()
        _ = try initiator.readMessage(second)
        let third = try initiator.writeMessage()
        _ = try responder.readMessage(third)
        #expect([first.count, second.count, third.count] == [32, 96, 64])
        #expect(initiator.handshakeHash == responder.handshakeHash)
    }

    @Test func everyFlippedBitOfMessagesTwoAndThreeFailsAuthentication() throws {
        for messageIndex in [1, 2] {
            let message = NoiseVectors.messages[messageIndex]
            for bit in stride(from: 0, to: message.count * 8, by: 7) {
                var tampered = message
                tampered[bit / 8] ^= 1 << (bit % 8)
                var reader = messageIndex == 1 ? NoiseVectors.initiator() : NoiseVectors.responder()
                if messageIndex == 1 {
                    _ = try reader.writeMessage(payload: NoiseVectors.payloads[0])
                } else {
                    _ = try reader.readMessage(NoiseVectors.messages[0])
                    _ = try reader.writeMessage(payload: NoiseVectors.payloads[1])
                }
                #expect(throws: NoiseError.self) { try reader.readMessage(tampered) }
                #expect(reader.hasFailed && !reader.isComplete)
            }
        }
    }

    @Test func truncatedMessagesAreRefusedWithTheirLength() throws {
        var responder = NoiseVectors.responder()
        #expect(throws: NoiseError.truncated(needed: 32, got: 31)) {
            try responder.readMessage(Array(NoiseVectors.messages[0].prefix(31)))
        }
        #expect(responder.hasFailed)
        #expect(throws: NoiseError.outOfTurn) { try responder.readMessage(NoiseVectors.messages[0]) }

        // Message 2 cut anywhere: too short, or the payload's tag no longer authenticates.
        for length in 0..<NoiseVectors.messages[1].count {
            var initiator = NoiseVectors.initiator()
            _ = try initiator.writeMessage(payload: NoiseVectors.payloads[0])
            #expect(throws: NoiseError.self) { try initiator.readMessage(Array(NoiseVectors.messages[1].prefix(length))) }
            #expect(!initiator.isComplete)
        }
    }

    @Test func aDifferentPrologueFailsAtTheFirstEncryptedMessage() throws {
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: Array("offer A".utf8))
        var responder = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: Array("offer B".utf8))
        _ = try responder.readMessage(try initiator.writeMessage())
        #expect(throws: NoiseError.authenticationFailed) { try initiator.readMessage(try responder.writeMessage()) }
    }

    @Test func aMessageFromAnotherSessionFailsAuthentication() throws {
        // Message 3 of a handshake with another responder ephemeral key: a replay into a new
        // session must not complete it.
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: [])
        var responder = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: [])
        _ = try responder.readMessage(try initiator.writeMessage())
        _ = try initiator.readMessage(try responder.writeMessage())
        _ = try initiator.writeMessage()

        var replayTarget = NoiseVectors.responder()
        _ = try replayTarget.readMessage(NoiseVectors.messages[0])
        _ = try replayTarget.writeMessage(payload: NoiseVectors.payloads[1])
        var otherInitiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: NoiseVectors.prologue)
        _ = try otherInitiator.writeMessage()
        #expect(throws: NoiseError.self) { try replayTarget.readMessage(try otherInitiator.writeMessage()) }
    }

    @Test func onlyAnAuthorizedKeyGetsPastTheHandshake() throws {
        let sender = HostIdentity()
        let receiver = HostIdentity()
        let stranger = HostIdentity()
        let sendersPeers = AuthorizedPeers([.init(key: receiver.publicKey, name: "receiver", line: 1)])
        let receiversPeers = AuthorizedPeers([.init(key: sender.publicKey, name: "sender", line: 1)])

        // The authorized receiver: the sender learns its key after message 2 and goes on.
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: sender.privateKey, prologue: [])
        var responder = NoiseXXHandshake(role: .responder, staticKey: receiver.privateKey, prologue: [])
        _ = try responder.readMessage(try initiator.writeMessage())
        _ = try initiator.readMessage(try responder.writeMessage())
        #expect(try initiator.authorizeRemote(by: sendersPeers).name == "receiver")
        _ = try responder.readMessage(try initiator.writeMessage())
        #expect(try responder.authorizeRemote(by: receiversPeers).name == "sender")

        // A stranger as receiver: the sender stops after message 2 and writes nothing more, so
        // its own static key (message 3) never leaves it.
        var cautious = NoiseXXHandshake(role: .initiator, staticKey: sender.privateKey, prologue: [])
        var impostor = NoiseXXHandshake(role: .responder, staticKey: stranger.privateKey, prologue: [])
        _ = try impostor.readMessage(try cautious.writeMessage())
        _ = try cautious.readMessage(try impostor.writeMessage())
        #expect(throws: NoiseError.unauthorizedPeer(stranger.publicKey)) { try cautious.authorizeRemote(by: sendersPeers) }
        #expect(throws: NoiseError.outOfTurn) { try cautious.writeMessage() }
        #expect(throws: NoiseError.outOfTurn) { try cautious.transportKeys() }
    }

    @Test func callsOutOfTurnAreRefused() throws {
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: [])
        #expect(throws: NoiseError.outOfTurn) { try initiator.readMessage([UInt8](repeating: 1, count: 32)) }
        var responder = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: [])
        #expect(throws: NoiseError.outOfTurn) { try responder.writeMessage() }
        #expect(throws: NoiseError.outOfTurn) { try responder.transportKeys() }
    }

    @Test func aLowOrderEphemeralKeyIsRefused() throws {
        // The all-zero point gives an all-zero shared secret: no contribution from the peer.
        var initiator = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: [])
        var responder = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: [])
        _ = try initiator.writeMessage()
        _ = try responder.readMessage([UInt8](repeating: 0, count: 32))
        #expect(throws: NoiseError.invalidPublicKey) { try responder.writeMessage() }
    }

    @Test func eachSideLearnsTheOthersStaticKeyForAnyPayloads() async {
        await propertyCheck(
            count: 40, input: Gen.uint8().array(of: 0...300), Gen.uint8().array(of: 0...300), Gen.uint8().array(of: 0...64)
        ) { payload2, payload3, prologue throws in
            let initiatorIdentity = HostIdentity()
            let responderIdentity = HostIdentity()
            var initiator = NoiseXXHandshake(role: .initiator, staticKey: initiatorIdentity.privateKey, prologue: prologue)
            var responder = NoiseXXHandshake(role: .responder, staticKey: responderIdentity.privateKey, prologue: prologue)
            _ = try responder.readMessage(try initiator.writeMessage())
            #expect(try initiator.readMessage(try responder.writeMessage(payload: payload2)) == payload2)
            #expect(try responder.readMessage(try initiator.writeMessage(payload: payload3)) == payload3)
            #expect(initiator.remoteStaticKey == responderIdentity.publicKey)
            #expect(responder.remoteStaticKey == initiatorIdentity.publicKey)
            #expect(initiator.handshakeHash == responder.handshakeHash)
        }
    }
}

extension NoiseXXHandshake {
    /// Noise's `Split()`: initiator → responder first.
    func splitCipherStates() -> (NoiseCipherState, NoiseCipherState)? {
        isComplete ? symmetric.split() : nil
    }
}
