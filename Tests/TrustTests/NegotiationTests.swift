import PropertyBased
import Testing
import Transfer

@testable import Trust

@Suite struct NegotiationTests {
    @Test func helloV2IsEighteenBytesAndNotTheRetiredVersion1() throws {
        let hello = HelloV2(session: 0x0102_0304_0506_0708, offered: [.secure, .multi])
        #expect(hello.encoded == [0x89, 0x42, 0x4C, 0x54, 0x48, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 3])
        #expect(!RetiredVersion1.isHello(hello.encoded))
        // And a version-1 HELLO is not a version-2 one.
        let version1: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x48, 1, 0, 0, 0, 0, 0, 0, 0, 1]
        #expect(RetiredVersion1.isHello(version1))
        #expect(HelloV2(parsing: version1) == nil)
    }

    @Test func unknownBitsAreClearedAndTheAnswerIsASubset() throws {
        var bytes = HelloV2(session: 9, offered: .known).encoded
        bytes[14] = 0xFF
        let hello = try #require(HelloV2(parsing: bytes + [0xAA]))  // a later version's extra byte
        #expect(hello.offered == .known)
        let prefix = StreamPrefix(answering: hello, supports: [.secure, .meta])
        #expect(prefix.chosen == [.secure, .meta])
        #expect(try StreamPrefix(parsing: prefix.encoded, hello: hello) == prefix)
    }

    @Test func theStreamPrefixStartsLikeAVersion1Header() throws {
        let hello = HelloV2(session: 0x5EED, offered: [.secure])
        let prefix = StreamPrefix(answering: hello, supports: .known).encoded
        #expect(prefix.count == 21)
        #expect(Array(prefix.prefix(8)) == [0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A])
        #expect(prefix[8] == 2)
        #expect(Array(prefix[9..<17]) == [0, 0, 0, 0, 0, 0, 0x5E, 0xED])
        // So the receiver tells a retired version-1 stream by its version byte alone.
        #expect(!RetiredVersion1.startsStream([0, 0] + prefix))
    }

    @Test func aPrefixForAnotherSessionOrWithUnofferedCapabilitiesIsRefused() {
        let hello = HelloV2(session: 1, offered: [.multi])
        let other = StreamPrefix(answering: HelloV2(session: 2, offered: [.multi]), supports: .known)
        #expect(throws: StreamPrefix.ParseError.sessionMismatch) { try StreamPrefix(parsing: other.encoded, hello: hello) }
        var greedy = StreamPrefix(answering: hello, supports: .known).encoded
        greedy[20] |= 0x01  // secure, never offered
        #expect(throws: StreamPrefix.ParseError.notOffered(.secure)) { try StreamPrefix(parsing: greedy, hello: hello) }
        let v1Header: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1] + [UInt8](repeating: 0, count: 48)
        #expect(throws: StreamPrefix.ParseError.notVersion2) { try StreamPrefix(parsing: v1Header, hello: hello) }
    }

    @Test func anEditedOfferMakesTheSecureHandshakeFail() throws {
        // The central offered secure+multi; an attacker strips multi from the HELLO the
        // peripheral sees. Both prologues differ, so message 2 does not authenticate.
        let written = HelloV2(session: 7, offered: [.secure, .multi])
        let seen = HelloV2(session: 7, offered: [.secure])
        let prefix = StreamPrefix(answering: seen, supports: .known)
        var peripheral = NoiseXXHandshake(
            role: .initiator, staticKey: .init(), prologue: StreamPrefix.prologue(hello: seen, prefix: prefix))
        var central = NoiseXXHandshake(
            role: .responder, staticKey: .init(), prologue: StreamPrefix.prologue(hello: written, prefix: prefix))
        _ = try central.readMessage(try peripheral.writeMessage())
        #expect(throws: NoiseError.authenticationFailed) { try peripheral.readMessage(try central.writeMessage()) }
    }

    @Test func anyHelloRoundTrips() async {
        await propertyCheck(count: 200, input: Gen.uint64(), Gen.uint32()) { session, bits in
            let hello = HelloV2(session: session, offered: Capabilities(rawValue: bits))
            let parsed = HelloV2(parsing: hello.encoded)
            #expect(parsed?.session == session)
            #expect(parsed?.offered == Capabilities(rawValue: bits).intersection(.known))
            // Unknown bits are cleared from the offer but kept in the bytes the prologue binds.
            #expect(parsed?.written == hello.encoded)
        }
    }
}
