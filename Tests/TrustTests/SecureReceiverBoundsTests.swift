import Transfer
import Crypto
import Testing

@testable import Trust

/// A sender that completes a genuine handshake and then seals whatever records a test asks
/// for, to reach the receiver's checks that a correct sender never trips.
struct HandcraftedSender {
    var handshake: NoiseXXHandshake
    var sealer: RecordSealer?
    var writer = SequencedStreamWriter(maximumValueLength: 182)
    var writes = SequencedStreamReader()
    var frames = FrameReader()

    init(identity: HostIdentity, hello: HelloV2, chosen: Capabilities) throws {
        let prefix = StreamPrefix(answering: hello, supports: chosen)
        handshake = NoiseXXHandshake(
            role: .initiator, staticKey: identity.privateKey, prologue: StreamPrefix.prologue(hello: hello, prefix: prefix))
        writer.append(prefix.encoded + Frame(type: .handshake, body: try handshake.writeMessage()).encoded)
        writer.flush()
    }

    mutating func readMessage2(_ values: [[UInt8]]) throws {
        for value in values {
            for piece in try writes.accept(value) {
                for frame in try frames.append(piece) { _ = try handshake.readMessage(frame.body) }
            }
        }
        writer.append(Frame(type: .handshake, body: try handshake.writeMessage()).encoded)
        sealer = try handshake.transportKeys().sealer
    }

    mutating func seal(_ records: [RecordMessage]) throws {
        for record in records { writer.append(try sealer!.seal(record.record)) }
    }

    mutating func append(_ bytes: [UInt8]) { writer.append(bytes) }

    mutating func values() -> [[UInt8]] {
        writer.flush()
        return writer.drain()
    }
}

@Suite struct SecureReceiverBoundsTests {
    static let payload: [UInt8] = Array(1...10)
    static let digest = Array(SHA256.hash(data: payload))
    static func header(_ length: UInt64 = 10, digest: [UInt8] = digest, message: UInt32 = 0, metadata: FileMetadata? = nil)
        -> RecordMessage
    {
        .header(MessageHeader(message: message, payloadLength: length, digest: digest, metadata: metadata))
    }

    /// Runs a handshake between a handcrafted sender and a receiver, then delivers `records`
    /// (and `extra` raw stream bytes after them); returns the receiver's events and error.
    func deliver(
        _ records: [RecordMessage], extra: [UInt8] = [], chosen: Capabilities = [.secure], limit: Int = 1000
    ) throws -> (events: [SecureReceiverSession.Event], error: SecureSessionError?) {
        let peripheral = HostIdentity()
        let central = HostIdentity()
        let hello = HelloV2(session: 77, offered: [.secure, .meta])
        var sender = try HandcraftedSender(identity: peripheral, hello: hello, chosen: chosen)
        var receiver = SecureReceiverSession(
            identity: central, authorizedPeers: authorized(peripheral), hello: hello,
            maximumPayloadLength: limit, maximumWriteLength: 182)
        var events: [SecureReceiverSession.Event] = []
        for value in sender.values() { events += try receiver.receiveNotification(value) }
        try sender.readMessage2(events.compactMap { if case .write(let value) = $0 { value } else { nil } })
        try sender.seal(records)
        sender.append(extra)
        do {
            for value in sender.values() { events += try receiver.receiveNotification(value) }
            events += try receiver.receiveNotification(SequencedStream.endOfMessage)
        } catch {
            return (events, error)
        }
        return (events, nil)
    }

    @Test func theHandcraftedSenderDeliversAGenuineMessage() throws {
        let result = try deliver([Self.header(), .data(message: 0, offset: 0, bytes: Self.payload), .end(message: 0, totalBytes: 10), .close(reason: 0)])
        #expect(result.error == nil)
        #expect(result.events.contains(.complete(header: MessageHeader(message: 0, payloadLength: 10, digest: Self.digest))))
        #expect(result.events.contains(.appended(offset: 0, bytes: Self.payload)))
        #expect(result.events.last == .endOfStream)
    }

    static let violations: [(String, [RecordMessage])] = [
        ("DATA at offset 1, 0 expected", [header(), .data(message: 0, offset: 1, bytes: [1])]),
        ("DATA beyond the announced 10 bytes", [header(), .data(message: 0, offset: 0, bytes: payload + [11])]),
        ("DATA of message 1, message 0 expected", [header(), .data(message: 1, offset: 0, bytes: payload)]),
        ("HEADER of message 1, message 0 expected", [header(message: 1)]),
        ("header record out of place", [header(), header()]),
        ("data record out of place", [.data(message: 0, offset: 0, bytes: payload)]),
        ("CLOSE (reason 0) before the message was complete", [header(), .close(reason: 0)]),
        ("ack record out of place", [.ack(SecureAck(message: 0, digest: digest, outcome: .stored))]),
        ("resume record out of place", [header(), .resume(message: 0, offset: 0)]),
        ("END of message 1, message 0 expected", [header(), .data(message: 0, offset: 0, bytes: payload), .end(message: 1, totalBytes: 10)]),
        ("record after CLOSE", [header(), .data(message: 0, offset: 0, bytes: payload), .end(message: 0, totalBytes: 10), .close(reason: 0), .close(reason: 0)]),
    ]

    @Test(arguments: violations)
    func aRecordOutOfPlaceIsAProtocolViolation(reason: String, records: [RecordMessage]) throws {
        let result = try deliver(records)
        #expect(result.error == .protocolViolation(reason))
        #expect(!result.events.contains { if case .complete = $0 { true } else { false } } || reason == "record after CLOSE")
    }

    @Test func metadataWithoutMetaIsAProtocolViolation() throws {
        let metadata = FileMetadata(name: "a", modificationSeconds: 0, modificationNanoseconds: 0)
        let refused = try deliver([Self.header(metadata: metadata)], chosen: [.secure])
        #expect(refused.error == .protocolViolation("HEADER with file metadata, but meta was not chosen"))
        let accepted = try deliver([Self.header(metadata: metadata)], chosen: [.secure, .meta])
        #expect(accepted.error == nil)
        #expect(accepted.events.contains(.header(MessageHeader(message: 0, payloadLength: 10, digest: Self.digest, metadata: metadata))))
    }

    @Test func aWrongLengthOrDigestAtEndIsADigestMismatch() throws {
        let shortEnd = try deliver([Self.header(), .data(message: 0, offset: 0, bytes: Array(Self.payload.prefix(9))), .end(message: 0, totalBytes: 9)])
        #expect(shortEnd.error == .digestMismatch)
        let otherDigest = try deliver([Self.header(digest: [UInt8](repeating: 0, count: 32)), .data(message: 0, offset: 0, bytes: Self.payload), .end(message: 0, totalBytes: 10)])
        #expect(otherDigest.error == .digestMismatch)
        #expect(!otherDigest.events.contains { if case .complete = $0 { true } else { false } })
    }

    @Test func tooLargeIsCheckedAgainstTheLimit() throws {
        #expect(try deliver([Self.header(1001)]).error == .tooLarge(announced: 1001, limit: 1000))
        #expect(try deliver([Self.header(UInt64.max)]).error == .tooLarge(announced: UInt64.max, limit: 1000))
        #expect(try deliver([Self.header(1000)]).error == nil)
    }

    @Test func badFramesAreRefused() throws {
        // A plain record, a handshake frame after the handshake, an unknown frame type, an
        // over-long frame (refused from its 3-byte header).
        for (extra, expected) in [
            ([0x03, 0, 2, 6, 0], "plain (retired type 03)"),
            (Frame(type: .handshake, body: [1, 2]).encoded, "handshake"),
            ([0x09, 0, 1, 0], "unknown"),
            ([0x02, 0xFF, 0xFF], "over-long"),
        ] as [([UInt8], String)] {
            let result = try deliver([Self.header()], extra: extra)
            #expect(result.error != nil, "\(expected)")
            #expect(!result.events.contains { if case .progress = $0 { true } else { false } }, "\(expected)")
        }
    }
}
