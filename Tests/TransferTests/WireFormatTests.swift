import Testing
@testable import Transfer
import TestSupport

/// The values documented in docs/wire-formats.md, checked byte for byte.
@Suite struct WireFormatTests {
    @Test func endOfMessageIsTheThreeASCIIBytes() {
        #expect(WireFormat.endOfMessage == Array("EOM".utf8))
    }

    @Test func valueLengthsStayWithinWhatATTCarries() {
        #expect(WireFormat.valueLength(forATTMTU: 23) == 20)
        #expect(WireFormat.valueLength(forATTMTU: 247) == 244)
        #expect(WireFormat.valueLength(forATTMTU: 9000) == 512)
    }

    /// The retired framed version 1 is told apart only to refuse it with one line.
    @Test func aRetiredVersion1HelloAndStreamAreRecognisedAndNothingElse() {
        let hello: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x48, 1, 1, 2, 3, 4, 5, 6, 7, 8]
        #expect(RetiredVersion1.isHello(hello))
        #expect(!RetiredVersion1.isHello(Array(hello.dropLast())))
        #expect(!RetiredVersion1.isHello([0x89, 0x42, 0x4C, 0x54, 0x48, 2] + Array(hello.suffix(8))))
        #expect(!RetiredVersion1.isHello(Array("hello, world!!".utf8)))
        let stream: [UInt8] = [0, 0, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1, 0xAB]
        #expect(RetiredVersion1.startsStream(stream))
        #expect(!RetiredVersion1.startsStream(Array(stream.prefix(10))))
        #expect(!RetiredVersion1.startsStream([0, 1] + stream.dropFirst(2)))
        #expect(!RetiredVersion1.startsStream(Array(stream.dropFirst(2))))
    }
}
