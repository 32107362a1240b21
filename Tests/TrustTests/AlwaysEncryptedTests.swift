import Crypto
import Testing

@testable import Trust

/// The framed protocol is always encrypted: keyless hosts run it with keys made for the run
/// (`AuthorizedPeers.anyKey`), the plain records are gone, and the handshake binds the
/// central's HELLO exactly as written.
@Suite struct AlwaysEncryptedTests {
    /// 16-byte windows of `payload` that occur in `bytes`.
    static func windowsFound(of payload: [UInt8], in bytes: [UInt8], width: Int = 16) -> Int {
        guard payload.count >= width, bytes.count >= width else { return 0 }
        var windows = Set<ArraySlice<UInt8>>()
        for start in 0...(payload.count - width) { windows.insert(payload[start..<(start + width)]) }
        var found = 0
        for start in 0...(bytes.count - width) where windows.contains(bytes[start..<(start + width)]) { found += 1 }
        return found
    }

    @Test(arguments: [0, 1, 5000, 70_000])
    func keylessHostsExchangeAMessageWithNothingInClear(size: Int) throws {
        let payload = testPayload(size, seed: 11)
        var pair = try SessionPair(keylessPayload: payload, valueLength: 182, metadata: nil,
                                   offered: [.meta, .multi, .window])
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completedPayload == payload)
        #expect(pair.sender.chosen.contains(.secure) && pair.receiver.isSecure)
        // Each side saw the other's run key, listed nowhere.
        let seenBySender = try #require(pair.sender.remotePeer)
        let seenByReceiver = try #require(pair.receiver.remotePeer)
        #expect(seenBySender.key == pair.central.publicKey && !seenBySender.isListed)
        #expect(seenByReceiver.key == pair.peripheral.publicKey && !seenByReceiver.isListed)
        // The check below can fail: the same search finds the payload in its own bytes.
        if size >= 16 {
            #expect(Self.windowsFound(of: payload, in: payload) >= size - 15)
        }
        #expect(Self.windowsFound(of: payload, in: transcript.notified.flatMap { $0 }) == 0)
    }

    @Test func anyKeyLetsInEveryKeyUnlistedAndAListStaysAList() {
        let stranger = HostIdentity().publicKey
        let entry = AuthorizedPeers.anyKey.peer(for: stranger)
        #expect(entry?.key == stranger && entry?.isListed == false && entry?.name == nil)
        #expect(AuthorizedPeers.anyKey.acceptsAnyKey)
        let listed = HostIdentity()
        let peers = authorized(listed)
        #expect(!peers.acceptsAnyKey)
        #expect(peers.peer(for: stranger) == nil)
        #expect(peers.peer(for: listed.publicKey)?.isListed == true)
    }

    @Test func aListingReceiverRefusesAKeylessSendersRunKey() throws {
        let payload = testPayload(300)
        var pair = try SessionPair(payload: payload, valueLength: 182, senderPeers: .anyKey,
                                   receiverPeers: authorized(HostIdentity()))
        let transcript = exchange(&pair)
        guard case .unauthorizedPeer(let key) = transcript.receiverError else {
            Issue.record("expected an unauthorized key, got \(String(describing: transcript.receiverError))")
            return
        }
        #expect(key == pair.peripheral.publicKey)
        #expect(!transcript.sawHeader && !transcript.sawComplete)
    }

    @Test func aSenderRefusesAHelloWithoutEncryption() {
        let payload = testPayload(10)
        for offered: Capabilities in [[], [.meta, .multi, .resume, .pipeline, .window]] {
            #expect(throws: SecureSessionError.notSecure) {
                try SecureSenderSession(identity: HostIdentity(), authorizedPeers: .anyKey,
                                        hello: HelloV2(session: 5, offered: offered), payload: payload,
                                        digest: Array(SHA256.hash(data: payload)), metadata: nil,
                                        maximumValueLength: 182)
            }
        }
    }

    /// A HELLO carrying a capability bit this build does not know: the parser clears it from
    /// `offered`, but `written` keeps it and the prologue binds it.
    @Test func theHelloIsBoundExactlyAsWritten() throws {
        let original = HelloV2(session: 0x55, offered: [.secure, .multi])
        var edited = original.written
        edited[14] |= 0x40   // bit 30: unknown to this build
        let parsed = try #require(HelloV2(parsing: edited))
        #expect(parsed.offered == original.offered)
        #expect(parsed.written == edited && parsed.written != original.written)
        let longer = try #require(HelloV2(parsing: original.written + [9, 9]))
        #expect(longer.written.count == HelloV2.encodedLength + 2)

        // A man in the middle sets that bit on its way: the central binds what it wrote, the
        // sender what it read, and the handshake fails before any record.
        let payload = testPayload(2000)
        let peripheral = HostIdentity(), central = HostIdentity()
        var pair = SessionPair(
            peripheral: peripheral, central: central,
            sender: try SecureSenderSession(identity: peripheral, authorizedPeers: authorized(central), hello: parsed,
                                            payload: payload, digest: Array(SHA256.hash(data: payload)),
                                            metadata: nil, maximumValueLength: 182),
            receiver: SecureReceiverSession(identity: central, authorizedPeers: authorized(peripheral), hello: original,
                                            maximumPayloadLength: 1 << 20, maximumWriteLength: 182))
        let transcript = exchange(&pair)
        #expect(transcript.failed)
        #expect(!transcript.sawHeader && !transcript.sawComplete)

        // The same HELLO unedited on both sides: the message arrives.
        var honest = try SessionPair(payload: payload, valueLength: 182, peripheral: peripheral, central: central)
        #expect(exchange(&honest).completedPayload == payload)
    }
}
