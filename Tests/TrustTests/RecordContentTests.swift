import PropertyBased
import Testing
import Transfer

@testable import Trust

@Suite struct RecordContentTests {
    let digest = [UInt8](0..<32)

    @Test func layoutsMatchTheDesign() throws {
        let header = MessageHeader(message: 1, payloadLength: 5, digest: digest)
        #expect(RecordMessage.header(header).record.content.count == 4 + 8 + 32 + 2)
        let ack = SecureAck(message: 1, digest: digest, outcome: .stored)
        #expect(RecordMessage.ack(ack).record.content == [0, 0, 0, 1] + digest + [0])
        #expect(RecordMessage.data(message: 2, offset: 3, bytes: [9]).record.content == [0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 9])
        #expect(RecordMessage.end(message: 2, totalBytes: 1).record.content.count == 12)
        #expect(RecordMessage.close(reason: 0).record == Record(kind: .close, content: [0]))
        let meta = try #require(FileMetadata(name: "photo.jpg", modificationSeconds: -1, modificationNanoseconds: 5))
        let withMeta = RecordMessage.header(MessageHeader(message: 0, payloadLength: 0, digest: digest, metadata: meta))
        // metadata: name length (1), name (9), seconds (8), nanoseconds (4) = 22
        #expect(Array(withMeta.record.content[44..<46]) == [0, 22])
        #expect(try RecordMessage(parsing: withMeta.record) == withMeta)
    }

    @Test func onlyTheMatchingStoredAckReleasesAMessage() {
        let header = MessageHeader(message: 7, payloadLength: 10, digest: digest)
        #expect(SecureAck(message: 7, digest: digest, outcome: .stored).releases(header))
        #expect(SecureAck(message: 7, digest: digest, outcome: .alreadyStored).releases(header))
        #expect(!SecureAck(message: 7, digest: digest, outcome: .refusedOverLimit).releases(header))
        #expect(!SecureAck(message: 8, digest: digest, outcome: .stored).releases(header))
        var other = digest
        other[31] ^= 1  // version 1 compared 6 bytes; this ACK names all 32
        #expect(!SecureAck(message: 7, digest: other, outcome: .stored).releases(header))
    }

    @Test func unsafeFileNamesAreRefusedBothWays() throws {
        for name in ["", ".", "..", "/etc/passwd", "a//b", "a/", "a/../b", "./a", "docs/..", "nul\0byte",
                     String(repeating: "x", count: 256)] {
            #expect(FileMetadata(name: name, modificationSeconds: 0, modificationNanoseconds: 0) == nil)
        }
        // A file of a tree: its path relative to the tree's parent.
        for name in ["a/b", "docs/notes/2024/plan.md", "..a/b..", ".hidden/x"] {
            #expect(FileMetadata(name: name, modificationSeconds: 0, modificationNanoseconds: 0)?.name == name)
        }
        #expect(FileMetadata(name: "ok", modificationSeconds: 0, modificationNanoseconds: 1_000_000_000) == nil)
        // A peer that sends one anyway: refused when parsed.
        let content = [0, 0, 0, 0] + [UInt8](repeating: 0, count: 8) + digest + [0, 15, 2, 0x2E, 0x2E]
            + [UInt8](repeating: 0, count: 12)
        #expect(throws: RecordContentError.malformed(kind: .header, reason: "file name is not a clean UTF-8 relative path")) {
            try RecordMessage(parsing: Record(kind: .header, content: content))
        }
    }

    @Test func truncatedExtendedAndUnknownContentsAreRefused() {
        #expect(throws: RecordContentError.truncated(kind: .end)) { try RecordMessage(parsing: Record(kind: .end, content: [0, 0, 0])) }
        #expect(throws: RecordContentError.trailingBytes(kind: .resume, count: 1)) {
            try RecordMessage(parsing: Record(kind: .resume, content: [UInt8](repeating: 0, count: 13)))
        }
        #expect(throws: RecordContentError.malformed(kind: .ack, reason: "unknown outcome 9")) {
            try RecordMessage(parsing: Record(kind: .ack, content: [0, 0, 0, 0] + digest + [9]))
        }
        #expect(throws: RecordContentError.malformed(kind: .data, reason: "no bytes")) {
            try RecordMessage(parsing: Record(kind: .data, content: [UInt8](repeating: 0, count: 12)))
        }
        for length in 0..<46 {
            #expect(throws: RecordContentError.truncated(kind: .header)) {
                try RecordMessage(parsing: Record(kind: .header, content: [UInt8](repeating: 0, count: length)))
            }
        }
    }

    @Test func anyMessageRoundTripsThroughASealedRecord() async {
        await propertyCheck(
            count: 200, input: Gen.uint32(), Gen.uint64(in: 0...(1 << 40)), Gen.uint8().array(of: 1...4096), Gen.int(in: 0...5)
        ) { number, offset, bytes, which throws in
            let message: RecordMessage =
                switch which {
                case 0: .header(MessageHeader(message: number, payloadLength: offset, digest: Array(bytes.prefix(32)) + [UInt8](repeating: 0, count: max(0, 32 - bytes.count))))
                case 1: .data(message: number, offset: offset, bytes: bytes)
                case 2: .end(message: number, totalBytes: offset)
                case 3: .ack(SecureAck(message: number, digest: [UInt8](repeating: bytes[0], count: 32), outcome: .alreadyStored))
                case 4: .resume(message: number, offset: offset)
                default: .close(reason: bytes[0])
                }
            var (sender, receiver) = try handshakePair()
            let opened = try receiver.opener.open(frame(try sender.sealer.seal(message.record)))
            #expect(try RecordMessage(parsing: opened) == message)
        }
    }
}

extension SecureAck {
    /// True when this ACK lets the sender release the message `header` announced: same
    /// message number, the full digest, and the receiver holds it.
    fileprivate func releases(_ header: MessageHeader) -> Bool {
        message == header.message && digest == header.digest && (outcome == .stored || outcome == .alreadyStored)
    }
}
