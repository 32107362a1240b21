import BlueZ
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Trust

/// `PairingConversation` over a local socket pair: how a pairing ends. Each side closes only
/// once it has heard the other's farewell, so a channel closing early cannot leave one side
/// paired and the other not (on an LE credit-based channel, closing drops what still waits
/// for credits).
@Suite struct PairingConversationTests {
    let alice = HostIdentity(name: "alice@laptop")
    let bob = HostIdentity(name: "bob@desk")

    static func meeting(_ socket: NotificationSocket, _ role: PairingExchange.Role, peer: String) -> PairingRendezvous.Meeting {
        PairingRendezvous.Meeting(socket: socket, role: role, firstMessage: nil, peerDescription: peer, peerAddress: nil)
    }

    /// The other side as a bare `PairingExchange` that answers yes, reads our farewell and
    /// then ends as told instead of saying its own.
    enum Ending {
        /// Closes: what we see when its farewell was cut off by its close.
        case closeWithoutFarewell
        /// Keeps the channel open and says nothing.
        case staySilent
    }

    static func scriptedPeer(_ socket: NotificationSocket, identity: HostIdentity, ending: Ending) async throws -> PairingExchange.Result {
        var exchange = PairingExchange(role: .responder, identity: identity, name: identity.name)
        for message in try exchange.start() { try await socket.send(message) }
        while case .exchanging = exchange.phase {
            let message = try #require(try await socket.receive())
            for reply in try exchange.receive(message) { try await socket.send(reply) }
        }
        for message in try exchange.answer(true) { try await socket.send(message) }
        while case .comparing = exchange.phase {
            _ = try exchange.receive(try #require(try await socket.receive()))
        }
        guard case .finished(let result) = exchange.phase else { throw CancellationError() }
        #expect(try await socket.receive() == PairingConversation.farewell)
        switch ending {
        case .closeWithoutFarewell: socket.close()
        case .staySilent: break   // the socket stays open until the test ends
        }
        return result
    }

    @Test func twoSidesEndPairedWithEachOthersKeyAfterBothFarewells() async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 600)
        defer { a.close(); b.close() }
        let (alice, bob) = (self.alice, self.bob)
        async let fromAlice = PairingConversation.run(
            Self.meeting(a, .initiator, peer: "bob"), identity: alice, name: alice.name, answerTimeout: .seconds(5)) { _ in true }
        async let fromBob = PairingConversation.run(
            Self.meeting(b, .responder, peer: "alice"), identity: bob, name: bob.name, answerTimeout: .seconds(5)) { _ in true }
        let (aliceResult, bobResult) = try await (fromAlice, fromBob)
        guard case .paired(let seenByAlice) = aliceResult, case .paired(let seenByBob) = bobResult else {
            Issue.record("not paired on both sides: \(aliceResult), \(bobResult)")
            return
        }
        #expect(seenByAlice.key == bob.publicKey && seenByBob.key == alice.publicKey)
        #expect(seenByAlice.expectedCode == seenByBob.shownCode && seenByBob.expectedCode == seenByAlice.shownCode)
    }

    /// An initiator that hears nothing at all on its channel, silence or a close, says so apart from every other
    /// failure (`Unanswered`), so that `pair` can try a fresh channel: nothing was exchanged yet.
    @Test(arguments: [false, true]) func initiatorHearingNothingIsUnanswered(peerCloses: Bool) async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 600)
        defer { a.close(); b.close() }
        if peerCloses { b.close() }
        let alice = self.alice
        do {
            _ = try await PairingConversation.run(
                Self.meeting(a, .initiator, peer: "bob"), identity: alice, name: alice.name,
                answerTimeout: .seconds(5), messageTimeout: .milliseconds(300)) { _ in true }
            Issue.record("a pairing with a peer that said nothing ended without an error")
        } catch let unanswered as PairingConversation.Unanswered {
            #expect(unanswered.failure.kind == (peerCloses ? .unavailable : .timedOut))
        }
    }

    /// A responder has heard the initiator's hello before the conversation starts: its silence later is a failure,
    /// never `Unanswered`.
    @Test func responderThatHeardTheHelloNeverCallsItUnanswered() async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 600)
        defer { a.close(); b.close() }
        var initiator = PairingExchange(role: .initiator, identity: alice, name: alice.name)
        let hello = try #require(try initiator.start().first)
        let meeting = PairingRendezvous.Meeting(socket: b, role: .responder, firstMessage: hello, peerDescription: "alice",
                                                peerAddress: nil)
        let bob = self.bob
        do {
            _ = try await PairingConversation.run(meeting, identity: bob, name: bob.name, answerTimeout: .seconds(5),
                                                  messageTimeout: .milliseconds(300)) { _ in true }
            Issue.record("a pairing whose initiator fell silent ended without an error")
        } catch let failure as RoleFailure {
            #expect(failure.kind == .timedOut)
        }
    }

    /// Alice pairs through `PairingConversation` with a scripted Bob that ends as told.
    func pairWithScriptedBob(ending: Ending, messageTimeout: Duration) async throws
        -> Result<PairingExchange.Result, RoleFailure> {
        let (a, b) = try NotificationSocket.makePair(mtu: 600)
        defer { a.close(); b.close() }
        let (alice, bob) = (self.alice, self.bob)
        async let peer = Self.scriptedPeer(b, identity: bob, ending: ending)
        let result: Result<PairingExchange.Result, RoleFailure>
        do {
            result = .success(try await PairingConversation.run(
                Self.meeting(a, .initiator, peer: "bob"), identity: alice, name: alice.name,
                answerTimeout: .seconds(5), messageTimeout: messageTimeout) { _ in true })
        } catch let failure as RoleFailure {
            result = .failure(failure)
        }
        _ = try await peer
        return result
    }

    @Test func aPeerThatClosesAfterOurFarewellWithoutItsOwnLeavesThisSidePaired() async throws {
        let result = try await pairWithScriptedBob(ending: .closeWithoutFarewell, messageTimeout: .seconds(15))
        guard case .success(.paired(let candidate)) = result else {
            Issue.record("not paired: \(result)")
            return
        }
        #expect(candidate.key == bob.publicKey)
    }

    @Test func aPeerSilentAfterTheAnswersAddsNothingAndTheLineSaysPairAgainOnBothHosts() async throws {
        let result = try await pairWithScriptedBob(ending: .staySilent, messageTimeout: .seconds(3))
        guard case .failure(let failure) = result else {
            Issue.record("a pairing whose end was never confirmed was taken: \(result)")
            return
        }
        #expect(failure.kind == .timedOut)
        #expect(failure.userMessage.contains("nothing added here"))
        #expect(failure.userMessage.contains("run 'bletransfer pair' again on both hosts"))
    }

    /// Alice pairs with a Bob that leaves (closes the channel) before the key exchange (on her
    /// hello) or right after it (on her Noise message 3, where he would commit).
    func pairWithBobLeaving(afterKeyExchange: Bool) async throws -> RoleFailure? {
        let (a, b) = try NotificationSocket.makePair(mtu: 600)
        defer { a.close(); b.close() }
        let (alice, bob) = (self.alice, self.bob)
        async let peer: Void = {
            var exchange = PairingExchange(role: .responder, identity: bob, name: bob.name)
            _ = try exchange.start()
            let hello = try #require(try await b.receive())
            if afterKeyExchange {
                for reply in try exchange.receive(hello) { try await b.send(reply) }
                _ = try #require(try await b.receive())
            }
            b.close()
        }()
        var failure: RoleFailure?
        do {
            _ = try await PairingConversation.run(
                Self.meeting(a, .initiator, peer: "bob"), identity: alice, name: alice.name,
                answerTimeout: .seconds(5), messageTimeout: .seconds(5)) { _ in true }
        } catch let error as RoleFailure {
            failure = error
        } catch let unanswered as PairingConversation.Unanswered {
            #expect(!afterKeyExchange, "a peer that answered the hello was called silent")
            failure = unanswered.failure
        }
        try await peer
        return failure
    }

    /// L-2: someone in the middle who sees the codes would differ breaks off after the key
    /// exchange, before anyone types a code: that end is reported as possible interference.
    @Test func aPairingThatEndsAfterTheKeyExchangeIsReportedAsPossibleInterference() async throws {
        let failure = try #require(try await pairWithBobLeaving(afterKeyExchange: true))
        #expect(failure.userMessage.contains("nothing added"))
        #expect(failure.userMessage.contains("someone in range were interfering"), "\(failure.userMessage)")
        #expect(failure.userMessage.contains("run 'bletransfer pair' again on both hosts"))
    }

    /// Before the key exchange nothing was proven to anyone: a peer that leaves then is only gone.
    @Test func aPairingThatEndsBeforeTheKeyExchangeIsNotCalledInterference() async throws {
        let failure = try #require(try await pairWithBobLeaving(afterKeyExchange: false))
        #expect(failure.userMessage.contains("left the pairing"))
        #expect(!failure.userMessage.contains("interfering"), "\(failure.userMessage)")
    }
}
