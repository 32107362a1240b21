import Crypto
import PropertyBased
import Testing

@testable import Trust

/// `bletransfer pair` as a pure machine (Sources/Trust/Pairing/PairingExchange.swift,
/// docs/pairing.md): two honest sides, a man in the middle, the commitment, the order of the
/// messages, the code and the names.
@Suite struct PairingExchangeTests {
    // Fixed keys: X25519 takes any 32 bytes as a private key.
    static func key(_ seed: UInt8) -> Curve25519.KeyAgreement.PrivateKey {
        privateKey([UInt8](repeating: seed, count: 32))
    }

    static func nonce(_ seed: UInt8) -> [UInt8] { [UInt8](repeating: seed, count: 32) }

    let alice = HostIdentity(privateKey: key(1), name: "alice@laptop")
    let bob = HostIdentity(privateKey: key(2), name: "bob@desk")
    let mallory = HostIdentity(privateKey: key(3), name: "mallory@van")

    // MARK: Harness

    /// The messages of one run, by the names of the doc comment's table.
    struct Transcript {
        var hello: [UInt8] = []
        var noise2: [UInt8] = []
        var noise3: [UInt8] = []
        var commit: [UInt8] = []
        var nonce: [UInt8] = []
        var reveal: [UInt8] = []
    }

    /// Runs the exchange up to the code, one message at a time, checking that each step gives
    /// exactly one message (the last none) and that nobody shows a code too early.
    static func run(_ initiator: inout PairingExchange, _ responder: inout PairingExchange) throws -> Transcript {
        var transcript = Transcript()
        #expect(try responder.start().isEmpty)
        transcript.hello = try #require(try initiator.start().only)
        transcript.noise2 = try #require(try responder.receive(transcript.hello).only)
        transcript.noise3 = try #require(try initiator.receive(transcript.noise2).only)
        transcript.commit = try #require(try responder.receive(transcript.noise3).only)
        #expect(initiator.phase == .exchanging && responder.phase == .exchanging)
        transcript.nonce = try #require(try initiator.receive(transcript.commit).only)
        #expect(initiator.phase == .exchanging)
        transcript.reveal = try #require(try responder.receive(transcript.nonce).only)
        #expect(try initiator.receive(transcript.reveal).isEmpty)
        return transcript
    }

    /// Delivers every message between two sides (first: the initiator's start) until neither
    /// has anything more to send. Order within each direction is kept, as an L2CAP channel does.
    static func relay(_ initiator: inout PairingExchange, _ responder: inout PairingExchange) throws {
        var toResponder = try initiator.start()
        var toInitiator = try responder.start()
        while !toResponder.isEmpty || !toInitiator.isEmpty {
            for message in toResponder { toInitiator += try responder.receive(message) }
            toResponder = []
            for message in toInitiator { toResponder += try initiator.receive(message) }
            toInitiator = []
        }
    }

    /// A responder that holds the session keys of `initiator`'s peer but is not a
    /// PairingExchange: it seals whatever it likes, the way a broken or hostile peer would.
    struct ForgingPeer {
        var handshake: NoiseXXHandshake
        var sealer: RecordSealer
        var opener: RecordOpener

        mutating func seal(_ content: [UInt8], kind: RecordKind = .pairing) throws -> [UInt8] {
            try sealer.seal(Record(kind: kind, content: content))
        }

        mutating func open(_ message: [UInt8]) throws -> Record {
            var reader = FrameReader()
            let frame = try #require(try reader.append(message).only)
            return try opener.open(frame)
        }
    }

    /// Runs the handshake with `initiator` (started here) from a bare Noise responder.
    static func forgingResponder(for initiator: inout PairingExchange, identity: HostIdentity) throws -> ForgingPeer {
        var handshake = NoiseXXHandshake(role: .responder, staticKey: identity.privateKey, prologue: PairingExchange.prologue)
        let hello = try #require(try initiator.start().only)
        _ = try handshake.readMessage(Array(hello.dropFirst(PairingExchange.magic.count + 1)))
        let noise3 = try #require(try initiator.receive(try handshake.writeMessage()).only)
        _ = try handshake.readMessage(noise3)
        let keys = try handshake.transportKeys()
        return ForgingPeer(handshake: handshake, sealer: keys.sealer, opener: keys.opener)
    }

    /// Runs the handshake with `responder` from a bare Noise initiator; returns the forger and
    /// the responder's COMMIT.
    static func forgingInitiator(for responder: inout PairingExchange, identity: HostIdentity) throws -> (
        ForgingPeer, commit: [UInt8]
    ) {
        var handshake = NoiseXXHandshake(role: .initiator, staticKey: identity.privateKey, prologue: PairingExchange.prologue)
        let hello = PairingExchange.magic + [PairingExchange.version] + (try handshake.writeMessage())
        let noise2 = try #require(try responder.receive(hello).only)
        _ = try handshake.readMessage(noise2)
        let commit = try #require(try responder.receive(try handshake.writeMessage()).only)
        let keys = try handshake.transportKeys()
        return (ForgingPeer(handshake: handshake, sealer: keys.sealer, opener: keys.opener), commit)
    }

    // MARK: Two honest sides

    @Test func honestSidesEachExpectTheCodeTheOtherShowsAndEachOthersKeyAndName() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        #expect(initiator.peerKey == nil && responder.peerKey == nil)
        try Self.relay(&initiator, &responder)

        let seenByAlice = try #require(initiator.phase.shown)
        let seenByBob = try #require(responder.phase.shown)
        #expect(seenByAlice.expectedCode == seenByBob.shownCode && seenByBob.expectedCode == seenByAlice.shownCode)
        // Each screen shows a code the other person types: not the one this host expects.
        #expect(seenByAlice.shownCode != seenByAlice.expectedCode)
        #expect(seenByAlice.isExpectedCode(seenByBob.shownCode) && !seenByAlice.isExpectedCode(seenByAlice.shownCode))
        #expect(seenByAlice.key == bob.publicKey && seenByAlice.name == "bob@desk")
        #expect(seenByBob.key == alice.publicKey && seenByBob.name == "alice@laptop")
        #expect(initiator.peerKey == bob.publicKey && responder.peerKey == alice.publicKey)
        #expect(!initiator.hasPeerAnswer && !responder.hasPeerAnswer)

        let fromAlice = try initiator.answer(true)
        let fromBob = try responder.answer(true)
        // One answer alone settles nothing.
        #expect(initiator.phase == .comparing(seenByAlice) && responder.phase == .comparing(seenByBob))
        for message in fromAlice { #expect(try responder.receive(message).isEmpty) }
        for message in fromBob { #expect(try initiator.receive(message).isEmpty) }
        #expect(initiator.hasPeerAnswer && responder.hasPeerAnswer)
        #expect(initiator.phase == .finished(.paired(seenByAlice)))
        #expect(responder.phase == .finished(.paired(seenByBob)))
        guard case .finished(.paired(let candidate)) = initiator.phase else { return }
        #expect(candidate.key == bob.publicKey)
    }

    @Test func honestSidesAgreeForAnyNonces() async {
        await propertyCheck(count: 50, input: Gen.uint8().array(of: 32), Gen.uint8().array(of: 32)) { ni, nr throws in
            var initiator = PairingExchange(role: .initiator, identity: alice, name: nil, nonce: ni)
            var responder = PairingExchange(role: .responder, identity: bob, name: nil, nonce: nr)
            try Self.relay(&initiator, &responder)
            let shownByInitiator = try #require(initiator.phase.shown)
            #expect(shownByInitiator.expectedCode == responder.phase.shown?.shownCode)
            #expect(shownByInitiator.shownCode == responder.phase.shown?.expectedCode)
            #expect(shownByInitiator.name == nil && responder.phase.shown?.name == nil)
        }
    }

    /// Who answers first, and whether the first answer reaches the other side before it
    /// answers (`peerFirst`) or both answer before either answer arrives.
    enum AnswerOrder: CaseIterable { case initiatorFirst, responderFirst, crossing }

    @Test(arguments: [(false, true), (true, false), (false, false), (true, true)], AnswerOrder.allCases)
    func answersSettleBothSides(answers: (initiator: Bool, responder: Bool), order: AnswerOrder) throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        try Self.relay(&initiator, &responder)
        let seenByAlice = try #require(initiator.phase.shown)
        let seenByBob = try #require(responder.phase.shown)

        switch order {
        case .initiatorFirst:
            for message in try initiator.answer(answers.initiator) { #expect(try responder.receive(message).isEmpty) }
            // The peer's answer arrived before ours: still comparing.
            #expect(responder.hasPeerAnswer && responder.phase == .comparing(seenByBob))
            for message in try responder.answer(answers.responder) { #expect(try initiator.receive(message).isEmpty) }
        case .responderFirst:
            for message in try responder.answer(answers.responder) { #expect(try initiator.receive(message).isEmpty) }
            #expect(initiator.hasPeerAnswer && initiator.phase == .comparing(seenByAlice))
            for message in try initiator.answer(answers.initiator) { #expect(try responder.receive(message).isEmpty) }
        case .crossing:
            let fromAlice = try initiator.answer(answers.initiator)
            let fromBob = try responder.answer(answers.responder)
            for message in fromAlice { #expect(try responder.receive(message).isEmpty) }
            for message in fromBob { #expect(try initiator.receive(message).isEmpty) }
        }

        if answers.initiator && answers.responder {
            #expect(initiator.phase == .finished(.paired(seenByAlice)))
            #expect(responder.phase == .finished(.paired(seenByBob)))
        } else {
            #expect(initiator.phase == .finished(.declined(here: !answers.initiator, byPeer: !answers.responder)))
            #expect(responder.phase == .finished(.declined(here: !answers.responder, byPeer: !answers.initiator)))
        }
    }

    // MARK: A man in the middle

    /// Mallory answers Alice's channel as a responder and opens one to Bob as an initiator,
    /// with his own identity, giving each the other's name; returns what Alice and Bob show.
    static func manInTheMiddle(
        alice: PairingExchange, bob: PairingExchange, mallory: HostIdentity,
        nonces: (towardsAlice: [UInt8]?, towardsBob: [UInt8]?) = (nil, nil),
        ephemeralKeys: (towardsAlice: Curve25519.KeyAgreement.PrivateKey?, towardsBob: Curve25519.KeyAgreement.PrivateKey?) = (nil, nil)
    ) throws -> (alice: PairingExchange, bob: PairingExchange, towardsAlice: PairingExchange, towardsBob: PairingExchange) {
        var alice = alice
        var bob = bob
        var towardsAlice = PairingExchange(
            role: .responder, identity: mallory, name: "bob@desk", nonce: nonces.towardsAlice,
            ephemeralKey: ephemeralKeys.towardsAlice)
        var towardsBob = PairingExchange(
            role: .initiator, identity: mallory, name: "alice@laptop", nonce: nonces.towardsBob,
            ephemeralKey: ephemeralKeys.towardsBob)
        try relay(&alice, &towardsAlice)
        try relay(&towardsBob, &bob)
        return (alice, bob, towardsAlice, towardsBob)
    }

    @Test func aManInTheMiddleMakesTheCodesDifferAndShowsHisOwnKey() throws {
        let result = try Self.manInTheMiddle(
            alice: PairingExchange(
                role: .initiator, identity: alice, name: alice.name, nonce: Self.nonce(0xA1), ephemeralKey: Self.key(0x11)),
            bob: PairingExchange(
                role: .responder, identity: bob, name: bob.name, nonce: Self.nonce(0xB0), ephemeralKey: Self.key(0x12)),
            mallory: mallory, nonces: (Self.nonce(0x31), Self.nonce(0x32)), ephemeralKeys: (Self.key(0x13), Self.key(0x14)))
        let seenByAlice = try #require(result.alice.phase.shown)
        let seenByBob = try #require(result.bob.phase.shown)
        // What Bob's screen shows is not what Alice's host expects, and the other way round.
        #expect(seenByAlice.expectedCode != seenByBob.shownCode && seenByBob.expectedCode != seenByAlice.shownCode)
        #expect(!seenByAlice.isExpectedCode(seenByBob.shownCode) && !seenByBob.isExpectedCode(seenByAlice.shownCode))
        // Each side sees Mallory's key under the name it expects: only the codes (and the
        // fingerprint) tell.
        #expect(seenByAlice.key == mallory.publicKey && seenByAlice.key != bob.publicKey)
        #expect(seenByBob.key == mallory.publicKey && seenByBob.key != alice.publicKey)
        #expect(seenByAlice.name == "bob@desk" && seenByBob.name == "alice@laptop")
        // Mallory's own sides agree with the host each faces: the two sessions are separate.
        #expect(result.towardsAlice.phase.shown?.shownCode == seenByAlice.expectedCode)
        #expect(result.towardsBob.phase.shown?.shownCode == seenByBob.expectedCode)

        // Mallory says yes on both; Alice types what Bob's screen shows, which is not the
        // code her host expects, so her answer is no.
        var alice = result.alice
        var towardsAlice = result.towardsAlice
        for message in try towardsAlice.answer(true) { _ = try alice.receive(message) }
        _ = try alice.answer(false)
        #expect(alice.phase == .finished(.declined(here: true, byPeer: false)))
    }

    @Test func aPersonWhoSaysYesWithoutComparingAddsTheManInTheMiddle() throws {
        // What the protocol cannot protect against: Mallory forges the other side's yes, so
        // Alice's own answer alone decides what her host adds.
        var result = try Self.manInTheMiddle(
            alice: PairingExchange(role: .initiator, identity: alice, name: alice.name),
            bob: PairingExchange(role: .responder, identity: bob, name: bob.name), mallory: mallory)
        for message in try result.towardsAlice.answer(true) { _ = try result.alice.receive(message) }
        _ = try result.alice.answer(true)
        guard case .finished(.paired(let added)) = result.alice.phase else {
            Issue.record("expected paired, got \(result.alice.phase)")
            return
        }
        #expect(added.key == mallory.publicKey)
    }

    @Test func aManInTheMiddleRarelyGetsEqualCodes() throws {
        // Each run: fresh nonces and ephemeral keys. A pair of equal codes has probability 10⁻⁶
        // per run, so any agreement in 200 runs ~2·10⁻⁴; more than two would be a broken code.
        var agreements = 0
        var codesSeenByAlice = Set<String>()
        for _ in 0..<200 {
            let result = try Self.manInTheMiddle(
                alice: PairingExchange(role: .initiator, identity: alice, name: alice.name),
                bob: PairingExchange(role: .responder, identity: bob, name: bob.name), mallory: mallory)
            let seenByAlice = try #require(result.alice.phase.shown)
            let seenByBob = try #require(result.bob.phase.shown)
            #expect(seenByAlice.key == mallory.publicKey && seenByBob.key == mallory.publicKey)
            if seenByAlice.isExpectedCode(seenByBob.shownCode) { agreements += 1 }
            codesSeenByAlice.insert(seenByAlice.expectedCode)
        }
        #expect(agreements <= 2)
        // The codes themselves vary from run to run (200 draws from 10⁶: a repeat is ~2 %).
        #expect(codesSeenByAlice.count >= 195)
    }

    // MARK: The commitment

    @Test func theCommitmentIsTheDocumentedHashAndDependsOnEveryByte() {
        let hash = [UInt8](0..<32)
        let nonce = [UInt8](0x40..<0x60)
        // From Python's hashlib: sha256(b"bletransfer pair commit" + hash + nonce).
        #expect(
            PairingExchange.commitment(hash: hash, nonce: nonce)
                == [UInt8](hex: "9dbb8fd7c3a072a4912763d4268bc1787dfc97b397878a24a959260c756260c5"))
        for index in 0..<32 {
            var otherNonce = nonce
            otherNonce[index] ^= 0x01
            var otherHash = hash
            otherHash[index] ^= 0x80
            #expect(PairingExchange.commitment(hash: hash, nonce: otherNonce) != PairingExchange.commitment(hash: hash, nonce: nonce))
            #expect(PairingExchange.commitment(hash: otherHash, nonce: nonce) != PairingExchange.commitment(hash: hash, nonce: nonce))
        }
    }

    @Test func theCommitOnTheWireCarriesTheCommitmentAndTheName() throws {
        var responder = PairingExchange(role: .responder, identity: bob, name: "bob@desk", nonce: Self.nonce(0x42))
        var (forger, commit) = try Self.forgingInitiator(for: &responder, identity: alice)
        let record = try forger.open(commit)
        let hash = forger.handshake.handshakeHash
        #expect(record.kind == .pairing)
        #expect(
            record.content
                == [PairingExchange.SealedKind.commit.rawValue] + PairingExchange.commitment(hash: hash, nonce: Self.nonce(0x42))
                + [8] + Array("bob@desk".utf8))

        // The responder reveals exactly the nonce it committed to, and its code is the
        // documented one.
        let initiatorNonce = Self.nonce(0x17)
        let nonceMessage = try forger.seal([PairingExchange.SealedKind.nonce.rawValue] + initiatorNonce + [0])
        let reveal = try #require(try responder.receive(nonceMessage).only)
        #expect(try forger.open(reveal).content == [PairingExchange.SealedKind.reveal.rawValue] + Self.nonce(0x42))
        let shown = try #require(responder.phase.shown)
        let codes = PairingExchange.codes(hash: hash, initiatorNonce: initiatorNonce, responderNonce: Self.nonce(0x42))
        #expect(shown.shownCode == codes.responder && shown.expectedCode == codes.initiator)
        #expect(shown.key == alice.publicKey && shown.name == nil)
    }

    @Test func aResponderCannotChangeItsNonceAfterTheCommit() throws {
        // Two responders with the same identity and ephemeral key but different nonces, against
        // two initiators alike in identity, ephemeral key and nonce: the handshakes are
        // byte-for-byte the same (Noise is deterministic once the keys are), so the sessions'
        // keys are too, and R2's REVEAL is validly sealed for I1 — it only opens a nonce R1 did
        // not commit to. This is a responder that changes its nonce after the commit.
        func initiator() -> PairingExchange {
            PairingExchange(role: .initiator, identity: alice, name: alice.name, nonce: Self.nonce(0x0A), ephemeralKey: Self.key(0x21))
        }
        func responder(nonce: UInt8) -> PairingExchange {
            PairingExchange(role: .responder, identity: bob, name: bob.name, nonce: Self.nonce(nonce), ephemeralKey: Self.key(0x22))
        }
        var (i1, r1) = (initiator(), responder(nonce: 0x01))
        var (i2, r2) = (initiator(), responder(nonce: 0x02))
        let hello = try #require(try i1.start().only)
        #expect(try i2.start() == [hello])
        let noise2 = try #require(try r1.receive(hello).only)
        #expect(try r2.receive(hello) == [noise2])
        let noise3 = try #require(try i1.receive(noise2).only)
        #expect(try i2.receive(noise2) == [noise3])
        let commit1 = try #require(try r1.receive(noise3).only)
        let commit2 = try #require(try r2.receive(noise3).only)
        #expect(commit1 != commit2)
        let nonce = try #require(try i1.receive(commit1).only)
        let reveal1 = try #require(try r1.receive(nonce).only)
        let reveal2 = try #require(try r2.receive(nonce).only)
        #expect(reveal1 != reveal2)

        // The twin of I1 accepts R1's own REVEAL (the trick is sound); I1 refuses R2's.
        #expect(try i2.receive(commit1) == [nonce])
        #expect(try i2.receive(reveal1).isEmpty)
        #expect(i2.phase.shown != nil)
        #expect(throws: PairingError.commitmentMismatch) { try i1.receive(reveal2) }
        // Nothing is shown, no answer can be given.
        #expect(i1.phase == .exchanging)
        #expect(throws: PairingError.self) { try i1.answer(true) }
    }

    // MARK: Order and malformed messages

    @Test func anInitiatorRefusesARevealWhereACommitIsDue() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var forger = try Self.forgingResponder(for: &initiator, identity: bob)
        let reveal = try forger.seal([PairingExchange.SealedKind.reveal.rawValue] + Self.nonce(7))
        let error = #expect(throws: PairingError.self) { try initiator.receive(reveal) }
        #expect(error?.isOutOfOrder == true)
        #expect(initiator.phase == .exchanging)
    }

    @Test func aReplayedRecordDoesNotOpenLater() throws {
        // The record counter binds the order too: a replayed COMMIT (the responder's first
        // sealed record) given where the REVEAL (its second) is due fails authentication.
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        let hello = try #require(try initiator.start().only)
        let noise2 = try #require(try responder.receive(hello).only)
        let noise3 = try #require(try initiator.receive(noise2).only)
        let commit = try #require(try responder.receive(noise3).only)
        let nonce = try #require(try initiator.receive(commit).only)
        let reveal = try #require(try responder.receive(nonce).only)
        // Replay the COMMIT where the REVEAL is due: its counter is behind.
        #expect(throws: PairingError.record(.authenticationFailed)) { try initiator.receive(commit) }
        // And the direction is dead from then on, even for the right message.
        #expect(throws: PairingError.record(.closedAfterFailure)) { try initiator.receive(reveal) }
    }

    @Test func aResponderRefusesAFirstMessageThatIsNotAPairing() throws {
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        #expect(throws: PairingError.notPairing) { try responder.receive([UInt8](repeating: 0x5A, count: 40)) }
        #expect(throws: PairingError.notPairing) { try responder.receive([]) }
        #expect(throws: PairingError.notPairing) { try responder.receive(PairingExchange.magic) }
        #expect(throws: PairingError.notPairing) { try responder.receive(Array("BLTPAIS".utf8) + [1] + Self.nonce(9)) }
        // A framed-v2 transfer's first bytes are not a pairing either.
        #expect(throws: PairingError.notPairing) { try responder.receive([0x01, 0x00, 0x20] + Self.nonce(9)) }

        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var hello = try #require(try initiator.start().only)
        // Version 1 showed one code on both hosts and asked for a yes: refused.
        hello[PairingExchange.magic.count] = 1
        #expect(throws: PairingError.unsupportedVersion(1)) { try responder.receive(hello) }
        hello[PairingExchange.magic.count] = 3
        #expect(throws: PairingError.unsupportedVersion(3)) { try responder.receive(hello) }
        hello[PairingExchange.magic.count] = 0
        #expect(throws: PairingError.unsupportedVersion(0)) { try responder.receive(hello) }
        #expect(!PairingExchange.isPairingHello(hello))
    }

    @Test func isPairingHelloOnlyForTheInitiatorsFirstMessage() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        let transcript = try Self.run(&initiator, &responder)
        #expect(PairingExchange.isPairingHello(transcript.hello))
        #expect(transcript.hello.count == PairingExchange.magic.count + 1 + 32)
        for other in [transcript.noise2, transcript.noise3, transcript.commit, transcript.nonce, transcript.reveal] {
            #expect(!PairingExchange.isPairingHello(other))
        }
        #expect(!PairingExchange.isPairingHello([]))
        #expect(!PairingExchange.isPairingHello(PairingExchange.magic))
        #expect(!PairingExchange.isPairingHello(PairingExchange.magic + [PairingExchange.version]))
        #expect(!PairingExchange.isPairingHello(Array("bltpair".utf8) + [1] + Self.nonce(1)))
        #expect(!PairingExchange.isPairingHello([0x01, 0x00, 0x20] + Self.nonce(1)))
    }

    @Test func aTamperedSealedMessageIsRefused() throws {
        // Every byte of the COMMIT, flipped in turn: the header's are refused as framing, the
        // ciphertext's and tag's fail authentication.
        func exchanges() -> (PairingExchange, PairingExchange) {
            (PairingExchange(role: .initiator, identity: alice, name: alice.name, nonce: Self.nonce(1), ephemeralKey: Self.key(0x41)),
             PairingExchange(role: .responder, identity: bob, name: bob.name, nonce: Self.nonce(2), ephemeralKey: Self.key(0x42)))
        }
        var (initiator, responder) = exchanges()
        let commit = try Self.run(&initiator, &responder).commit
        for index in commit.indices {
            var (initiator, responder) = exchanges()
            let hello = try #require(try initiator.start().only)
            let noise2 = try #require(try responder.receive(hello).only)
            let noise3 = try #require(try initiator.receive(noise2).only)
            #expect(try responder.receive(noise3) == [commit])
            var tampered = commit
            tampered[index] ^= 0x01
            let error = #expect(throws: PairingError.self) { try initiator.receive(tampered) }
            if index >= Frame.headerLength {
                #expect(error == .record(.authenticationFailed))
                // The direction is closed: not even the real COMMIT opens now.
                #expect(throws: PairingError.record(.closedAfterFailure)) { try initiator.receive(commit) }
            } else {
                // Another frame type, or a length that does not end where the message does.
                #expect(error?.isMalformed == true)
            }
            #expect(initiator.phase == .exchanging)
        }
    }

    @Test func aTamperedHandshakeMessageIsRefused() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        let hello = try #require(try initiator.start().only)
        var noise2 = try #require(try responder.receive(hello).only)
        noise2[40] ^= 0x01  // inside the encrypted static key
        #expect(throws: PairingError.handshake(.authenticationFailed)) { try initiator.receive(noise2) }
        #expect(initiator.peerKey == nil)
    }

    @Test func anAnswerBeforeTheCodeIsRefused() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        #expect(throws: PairingError.self) { try initiator.answer(true) }
        let hello = try #require(try initiator.start().only)
        let noise2 = try #require(try responder.receive(hello).only)
        let noise3 = try #require(try initiator.receive(noise2).only)
        let commit = try #require(try responder.receive(noise3).only)
        // The handshake is done, the commitment in: still no code.
        _ = try initiator.receive(commit)
        for exchange in [initiator, responder] {
            var exchange = exchange
            let error = #expect(throws: PairingError.self) { try exchange.answer(true) }
            #expect(error?.isOutOfOrder == true)
        }
        #expect(throws: PairingError.self) { try initiator.start() }
    }

    @Test func nothingIsTakenAfterTheAnswers() throws {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        let transcript = try Self.run(&initiator, &responder)
        let fromAlice = try #require(try initiator.answer(true).only)
        // A second answer from the same person is refused.
        let twice = #expect(throws: PairingError.self) { try initiator.answer(false) }
        #expect(twice?.isOutOfOrder == true)
        #expect(try responder.receive(fromAlice).isEmpty)
        // The peer's answer is in: any further message is out of order, even a replayed one.
        for message in [fromAlice, transcript.reveal, transcript.hello] {
            let error = #expect(throws: PairingError.self) { try responder.receive(message) }
            #expect(error?.isOutOfOrder == true)
        }
        let fromBob = try #require(try responder.answer(true).only)
        _ = try initiator.receive(fromBob)
        let afterBoth = #expect(throws: PairingError.self) { try initiator.receive(fromBob) }
        #expect(afterBoth?.isOutOfOrder == true)
        let late = #expect(throws: PairingError.self) { try initiator.answer(true) }
        #expect(late?.isOutOfOrder == true)
        #expect(initiator.phase.isPaired && responder.phase.isPaired)
    }

    @Test func malformedSealedContentIsRefused() throws {
        // From a peer holding the session keys: what a broken implementation might send.
        let cases: [(String, [UInt8], RecordKind, (PairingError) -> Bool)] = [
            ("short commitment", [1] + [UInt8](repeating: 0, count: 20), .pairing, \.isMalformed),
            ("name length past the end", [1] + Self.nonce(3) + [5, 0x61], .pairing, \.isMalformed),
            ("name length short of the end", [1] + Self.nonce(3) + [1, 0x61, 0x62], .pairing, \.isMalformed),
            ("name over 64 bytes", [1] + Self.nonce(3) + [65] + [UInt8](repeating: 0x61, count: 65), .pairing, \.isMalformed),
            ("no name field", [1] + Self.nonce(3), .pairing, \.isMalformed),
            ("unknown sealed kind", [9] + Self.nonce(3) + [0], .pairing, \.isMalformed),
            ("empty pairing record", [], .pairing, \.isMalformed),
            ("a transfer's record", [1] + Self.nonce(3) + [0], .data, \.isMalformed),
            ("an answer where the commit is due", [4, 1], .pairing, \.isOutOfOrder),
        ]
        for (what, content, kind, matches) in cases {
            var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
            var forger = try Self.forgingResponder(for: &initiator, identity: bob)
            let message = try forger.seal(content, kind: kind)
            let error = #expect(throws: PairingError.self, "\(what)") { try initiator.receive(message) }
            #expect(error.map(matches) == true, "\(what): \(String(describing: error))")
        }

        // An answer that is neither 00 nor 01, and a REVEAL with bytes after the nonce.
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name, nonce: Self.nonce(4))
        var forger = try Self.forgingResponder(for: &initiator, identity: bob)
        let hash = forger.handshake.handshakeHash
        _ = try initiator.receive(
            try forger.seal([1] + PairingExchange.commitment(hash: hash, nonce: Self.nonce(5)) + [0]))
        let longReveal = try forger.seal([3] + Self.nonce(5) + [0])
        let error = #expect(throws: PairingError.self) { try initiator.receive(longReveal) }
        #expect(error?.isMalformed == true)

        var honest = PairingExchange(role: .initiator, identity: alice, name: alice.name, nonce: Self.nonce(4))
        var honestForger = try Self.forgingResponder(for: &honest, identity: bob)
        _ = try honest.receive(
            try honestForger.seal([1] + PairingExchange.commitment(hash: honestForger.handshake.handshakeHash, nonce: Self.nonce(5)) + [0]))
        #expect(try honest.receive(try honestForger.seal([3] + Self.nonce(5))).isEmpty)
        #expect(honest.phase.shown != nil)
        let maybe = try honestForger.seal([4, 2])
        let answerError = #expect(throws: PairingError.self) { try honest.receive(maybe) }
        #expect(answerError?.isMalformed == true)
    }

    @Test func anOverlongMessageIsRefusedBeforeItIsRead() {
        var responder = PairingExchange(role: .responder, identity: bob, name: bob.name)
        let long = PairingExchange.magic + [PairingExchange.version]
            + [UInt8](repeating: 0, count: PairingExchange.maximumMessageLength)
        let error = #expect(throws: PairingError.self) { try responder.receive(long) }
        #expect(error?.isMalformed == true)
    }

    // MARK: The code

    @Test func theCodeIsTheDocumentedDerivation() {
        let hash = [UInt8](0..<32)
        let ni = [UInt8](0x20..<0x40)
        let nr = [UInt8](0x40..<0x60)
        // From Python's hashlib: SHA-256("bletransfer pair code" · h · Ni · Nr); the
        // initiator's code from its first 8 bytes, the responder's from the next 8, each
        // big-endian, mod 10⁶, six digits with leading zeros.
        #expect(PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: nr).initiator == "183519")
        #expect(PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: nr) == ("183519", "790532"))
        #expect(PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: Self.nonce(139)) == ("000619", "669554"))
        let padded = PairingExchange.Candidate(key: alice.publicKey, name: nil, shownCode: "000619", expectedCode: "669554")
        #expect(padded.spacedShownCode == "000 619")
    }

    @Test func onlyTheOtherHostsSixDigitsAreTakenAsTheAnswer() {
        let candidate = PairingExchange.Candidate(key: alice.publicKey, name: nil, shownCode: "402117", expectedCode: "090512")
        for typed in ["090512", "090 512", "090-512", " 090512 "] {
            #expect(candidate.isExpectedCode(typed), "\(typed)")
        }
        // Its own code, a yes, part of the code, more digits, other digits that look alike.
        for typed in ["402117", "402 117", "y", "yes", "", "09051", "0905120", "90512", "０９０５１２", "090512y"] {
            #expect(!candidate.isExpectedCode(typed), "\(typed)")
        }
    }

    @Test func theCodeIsSixDigitsAndDependsOnEveryInput() async {
        await propertyCheck(
            count: 200, input: Gen.uint8().array(of: 32), Gen.uint8().array(of: 32), Gen.uint8().array(of: 32),
            Gen.int(in: 0...31)
        ) { hash, ni, nr, index in
            let code = PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: nr).initiator
            #expect(code.utf8.count == 6 && code.utf8.allSatisfy { (0x30...0x39).contains($0) })
            let candidate = PairingExchange.Candidate(key: alice.publicKey, name: nil, shownCode: code, expectedCode: code)
            let spaced = Array(candidate.spacedShownCode.utf8)
            #expect(spaced.count == 7 && spaced[3] == 0x20)
            #expect(candidate.spacedShownCode.replacingSpace == code)
            let codes = PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: nr)
            #expect(codes.responder.utf8.count == 6 && codes.responder.utf8.allSatisfy { (0x30...0x39).contains($0) })

            // Any change of any input changes the code (a chance collision is 10⁻⁶ a case).
            var otherHash = hash
            otherHash[index] ^= 0x01
            var otherNi = ni
            otherNi[index] ^= 0x01
            var otherNr = nr
            otherNr[index] ^= 0x01
            #expect(PairingExchange.codes(hash: otherHash, initiatorNonce: ni, responderNonce: nr).initiator != code)
            #expect(PairingExchange.codes(hash: hash, initiatorNonce: otherNi, responderNonce: nr).initiator != code)
            #expect(PairingExchange.codes(hash: hash, initiatorNonce: ni, responderNonce: otherNr).initiator != code)
            // The nonces' order counts: the roles are not interchangeable.
            if ni != nr { #expect(PairingExchange.codes(hash: hash, initiatorNonce: nr, responderNonce: ni).initiator != code) }
        }
    }

    // MARK: Names

    /// The name the responder shows when the initiator calls itself `name`, and the one the
    /// initiator shows when the responder does.
    func namesSeen(giving name: String?) throws -> (byResponder: String?, byInitiator: String?) {
        var initiator = PairingExchange(role: .initiator, identity: alice, name: name)
        var responder = PairingExchange(role: .responder, identity: bob, name: name)
        try Self.relay(&initiator, &responder)
        return (responder.phase.shown?.name, initiator.phase.shown?.name)
    }

    @Test(arguments: ["evil\nname", "evil\rname", "tab\tname", "bell\u{7}", "esc\u{1B}[2J", "rtl\u{202E}txt", "line\u{2028}sep",
                      " leading", "trailing ", ""])
    func aNameThatCannotBeWrittenInAKeyLineArrivesAsNil(name: String) throws {
        let seen = try namesSeen(giving: name)
        #expect(seen.byResponder == nil && seen.byInitiator == nil)
    }

    @Test func namesArriveAsGiven() throws {
        for name in ["bob@desk", "Zoë’s laptop", "上海-服务器", String(repeating: "x", count: 64)] {
            let seen = try namesSeen(giving: name)
            #expect(seen.byResponder == name && seen.byInitiator == name)
        }
        let none = try namesSeen(giving: nil)
        #expect(none.byResponder == nil && none.byInitiator == nil)
    }

    @Test(arguments: [
        String(repeating: "a", count: 200),
        String(repeating: "é", count: 100),  // 2 bytes each
        String(repeating: "€", count: 67),  // 3 bytes each: 21 fit
        String(repeating: "e\u{301}", count: 67),  // "é" decomposed, 3 bytes a character: never a bare "e"
        String(repeating: "🇫🇷", count: 25),  // two scalars, 8 bytes a character: 8 fit
        String(repeating: "a", count: 63) + String(repeating: "é", count: 70),
    ])
    func aLongNameIsCutOnACharacterBoundary(name: String) throws {
        #expect(name.utf8.count >= 200)
        let seen = try namesSeen(giving: name)
        let received = try #require(seen.byResponder)
        #expect(seen.byInitiator == received)
        #expect(received.utf8.count <= PairingExchange.maximumNameBytes)
        // Cut, not shortened to nothing: within one character of the limit.
        #expect(received.utf8.count > PairingExchange.maximumNameBytes - (name.first?.utf8.count ?? 0) - 2)
        #expect(name.hasPrefix(received))
        #expect(received == PairingExchange.cut(name))
    }

    @Test func theCutKeepsAPrefix() {
        // 63 bytes, then a 2-byte character that does not fit, then a 1-byte one that would:
        // a cut on a character boundary ends before the "é".
        let name = String(repeating: "a", count: 63) + "é" + "b"
        let cut = PairingExchange.cut(name)
        #expect(cut.utf8.count <= PairingExchange.maximumNameBytes)
        #expect(cut == String(repeating: "a", count: 63))
        // A cut ending in a space is trimmed: the name stays one a key line can hold.
        #expect(PairingExchange.cut(String(repeating: "a", count: 63) + " bc") == String(repeating: "a", count: 63))
    }
}

extension PairingExchange.Phase {
    /// What the person is asked to compare, when the code is known.
    var shown: PairingExchange.Candidate? {
        if case .comparing(let candidate) = self { return candidate }
        return nil
    }

    var isPaired: Bool {
        if case .finished(.paired) = self { return true }
        return false
    }
}

extension PairingError {
    var isOutOfOrder: Bool {
        if case .outOfOrder = self { return true }
        return false
    }

    var isMalformed: Bool {
        if case .malformed = self { return true }
        return false
    }
}

extension Array {
    /// The one element, when there is exactly one.
    fileprivate var only: Element? { count == 1 ? first : nil }
}

extension String {
    fileprivate var replacingSpace: String { filter { $0 != " " } }
}

extension PairingExchange {
    var hasPeerAnswer: Bool { peerAnswer != nil }
}
