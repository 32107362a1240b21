import Testing
@testable import Transfer
import TestSupport

/// The byte layouts documented in docs/wire-formats.md, checked byte for byte.
@Suite struct WireFormatTests {
    let session = SessionID(rawValue: 0x0102_0304_0506_0708)

    @Test func endOfMessageIsTheThreeASCIIBytes() {
        #expect(WireFormat.endOfMessage == Array("EOM".utf8))
    }

    @Test func helloLayout() {
        let value = WireFormat.helloValue(session: session)
        #expect(value == [0x89, 0x42, 0x4C, 0x54, 0x48, 0x01, 1, 2, 3, 4, 5, 6, 7, 8])
        #expect(value.count <= WireFormat.minimumValueLength)
        #expect(WireFormat.isHello(value))
        #expect(WireFormat.parseHello(value) == Hello(version: 1, session: session))
    }

    @Test func helloParsingRefusesMalformedValues() {
        let good = WireFormat.helloValue(session: session)
        #expect(!WireFormat.isHello([]))
        #expect(!WireFormat.isHello(Array(good.dropLast())))
        #expect(!WireFormat.isHello(good + [0]))  // version 1 is exactly 14 bytes
        var versionZero = good
        versionZero[5] = 0
        #expect(!WireFormat.isHello(versionZero))
        var badMagic = good
        badMagic[0] = 0x88
        #expect(!WireFormat.isHello(badMagic))
        #expect(!WireFormat.isHello(Array("hello".utf8)))
        // A later version may say more; we take its session and answer with version 1.
        var future = good + [0xFF, 0xFF]
        future[5] = 2
        #expect(WireFormat.parseHello(future) == Hello(version: 2, session: session))
    }

    @Test func headerLayout() {
        let digest = (0..<32).map { UInt8($0) }
        let header = FramedHeader(session: session, payloadLength: 0x0A0B, digest: digest)
        let expected: [UInt8] =
            [0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0x0A, 0x0B]
            + digest
        #expect(header.encoded == expected)
        #expect(header.encoded.count == FramedHeader.encodedLength)
        // Magic, version and session fit the first value at the smallest MTU.
        #expect(FramedHeader.sessionOffset + 8 <= WireFormat.minimumValueLength)
    }

    @Test func headerDigestIsSHA256() {
        // SHA-256("abc"), FIPS 180-2 appendix B.1.
        let abc = FramedHeader(session: session, payload: Array("abc".utf8))
        let hex: String = abc.digest.map { byte -> String in
            let digits = String(byte, radix: 16)
            return byte < 16 ? "0" + digits : digits
        }.joined()
        #expect(hex == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(abc.payloadLength == 3)
    }

    @Test func magicCannotStartUTF8Text() {
        #expect(String(validating: FramedHeader.magic, as: UTF8.self) == nil)
        #expect(FramedHeader.magic.count == 8)
    }

    @Test func ackLayoutAndParsing() {
        let digest = (100..<132).map { UInt8($0) }
        let header = FramedHeader(session: session, payloadLength: 1, digest: digest)
        let value = WireFormat.ackValue(for: header)
        #expect(value == [0x89, 0x42, 0x4C, 0x54, 0x41, 0x01, 1, 2, 3, 4, 5, 6, 7, 8, 100, 101, 102, 103, 104, 105])
        #expect(value.count == WireFormat.minimumValueLength)
        let ack = WireFormat.parseAck(value)
        #expect(ack?.session == session)
        #expect(ack?.acknowledges(header) == true)

        let received = ReceivedMessage(payload: [0], format: .framed, header: header)
        #expect(WireFormat.ackValue(for: received) == value)
        #expect(WireFormat.ackValue(for: ReceivedMessage(payload: [0], format: .compat)) == nil)
    }

    @Test func ackParsingRefusesMalformedValues() {
        let good = WireFormat.ackValue(for: FramedHeader(session: session, payload: [1]))
        #expect(WireFormat.parseAck([]) == nil)
        #expect(WireFormat.parseAck(Array(good.dropLast())) == nil)
        #expect(WireFormat.parseAck(good + [0]) == nil)
        var version = good
        version[5] = 2
        #expect(WireFormat.parseAck(version) == nil)
        #expect(WireFormat.parseAck(WireFormat.helloValue(session: session)) == nil)
        #expect(WireFormat.parseHello(good) == nil)
    }

    @Test func sessionIDBytesAreBigEndian() {
        #expect(session.bytes == [1, 2, 3, 4, 5, 6, 7, 8])
        #expect(session.description == "0102030405060708")
        var generator = SeededGenerator(seed: 1)
        #expect(SessionID.random(using: &generator) != SessionID.random(using: &generator))
    }
}
