import Testing
@testable import Transfer

@Suite struct MessageReceiverTests {
    let hello = Hello(session: SessionID(rawValue: 0xABCD))

    func framedValues(_ payload: [UInt8], valueLength: Int = 20) -> [[UInt8]] {
        allValues(MessageSender(message: OutgoingMessage(payload: payload), replyingTo: hello, maximumValueLength: valueLength))
    }

    func header(length: UInt64, digest: [UInt8] = [UInt8](repeating: 0, count: 32), session: SessionID? = nil, version: UInt8 = 1) -> [UInt8] {
        FramedHeader.magic + [version] + (session ?? hello.session).bytes
            + (0..<8).map { UInt8(truncatingIfNeeded: length >> (56 - 8 * $0)) } + digest
    }

    /// Framed values: each piece behind its sequence number (0, 1, …).
    func sequenced(_ pieces: [[UInt8]], from first: Int = 0) -> [[UInt8]] {
        pieces.enumerated().map { index, piece in
            let sequence = UInt16(truncatingIfNeeded: first + index)
            return [UInt8(sequence >> 8), UInt8(sequence & 0xFF)] + piece
        }
    }

    /// Feeds values until one throws; returns that error.
    func firstError(_ values: [[UInt8]], receiver: inout MessageReceiver) -> ReceiveError? {
        for value in values {
            do { _ = try receiver.receive(value) } catch { return error }
        }
        return nil
    }

    @Test func progressReportsBytesAndTotal() throws {
        var receiver = MessageReceiver(sentHello: hello)
        let values = framedValues([UInt8](repeating: 1, count: 50), valueLength: 40)
        #expect(try receiver.receive(values[0]) == .progress(TransferProgress(bytesSoFar: 0, totalBytes: nil)))
        #expect(receiver.detectedFormat == .framed)
        // 38 header bytes, then 19 header and 19 payload bytes.
        #expect(try receiver.receive(values[1]) == .progress(TransferProgress(bytesSoFar: 19, totalBytes: 50)))
        _ = try receiver.receive(values[2])
        guard case .complete = try receiver.receive(values[3]) else {
            Issue.record("expected completion")
            return
        }
        #expect(receiver.progress == TransferProgress(bytesSoFar: 50, totalBytes: 50))

        var compat = MessageReceiver()
        #expect(compat.detectedFormat == nil)
        #expect(try compat.receive([1, 2, 3, 4]) == .progress(TransferProgress(bytesSoFar: 4, totalBytes: nil)))
        #expect(compat.detectedFormat == .compat)
    }

    @Test func withoutHelloEverythingIsCompat() throws {
        let values = framedValues([1, 2, 3])
        let message = try reassemble(values, hello: nil)
        #expect(message?.format == .compat)
        #expect(message?.payload == values.dropLast().flatMap { $0 })
    }

    @Test func headerAnnouncingMoreThanTheLimitIsRefusedBeforeStoringPayload() {
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: 1000), sentHello: hello)
        let error = firstError(sequenced([header(length: 1001)]), receiver: &receiver)
        #expect(error == .announcedLengthExceedsLimit(announced: 1001, limit: 1000))
        #expect(receiver.bufferedByteCount == 0)

        var huge = MessageReceiver(sentHello: hello)
        #expect(firstError(sequenced([header(length: .max)]), receiver: &huge)
            == .announcedLengthExceedsLimit(announced: .max, limit: TransferLimits.default.maximumMessageSize))
    }

    @Test func dataAfterTheAnnouncedLengthIsRefused() {
        var receiver = MessageReceiver(sentHello: hello)
        let error = firstError(sequenced([header(length: 4), [1, 2, 3], [4, 5]]), receiver: &receiver)
        #expect(error == .dataAfterAnnouncedLength(announced: 4))
        // Data within the header value beyond the length counts as well.
        var inline = MessageReceiver(sentHello: hello)
        #expect(firstError(sequenced([header(length: 1) + [1, 2]]), receiver: &inline) == .dataAfterAnnouncedLength(announced: 1))
    }

    /// `EOM` may overtake the last values, so it does not end a short message at once; when the
    /// sender goes quiet or away, the missing bytes are reported as a truncation.
    @Test func eomBeforeTheAnnouncedLengthIsTruncation() {
        var receiver = MessageReceiver(sentHello: hello)
        #expect(firstError(sequenced([header(length: 10), [1, 2, 3]]) + [WireFormat.endOfMessage], receiver: &receiver) == nil)
        #expect(!receiver.isComplete && receiver.endOfMessageSeen)
        #expect(receiver.finishWithoutEOM() == .truncatedPayload(received: 3, announced: 10))
    }

    @Test func eomInsideTheHeaderIsTruncation() {
        var receiver = MessageReceiver(sentHello: hello)
        let partial = Array(header(length: 10).prefix(30))
        #expect(firstError(sequenced([partial]) + [WireFormat.endOfMessage], receiver: &receiver) == nil)
        #expect(receiver.finishWithoutEOM() == .truncatedHeader(receivedBytes: 30))
    }

    @Test func headerMaySpanManyValues() throws {
        let payload: [UInt8] = [5, 6, 7]
        let whole = header(length: 3, digest: FramedHeader.sha256(payload)) + payload
        // 8 bytes of magic first, then one byte at a time.
        var values = sequenced([Array(whole[0..<8])] + whole[8...].map { [$0] })
        values.append(WireFormat.endOfMessage)
        #expect(try reassemble(values, hello: hello)?.payload == payload)
    }

    @Test func digestMismatchIsRefused() {
        var values = framedValues(Array("hello, world".utf8), valueLength: 512)
        values[0][values[0].count - 1] ^= 0x01  // flip one payload bit
        var receiver = MessageReceiver(sentHello: hello)
        guard case .digestMismatch(let announced, let computed)? = firstError(values, receiver: &receiver) else {
            Issue.record("expected a digest mismatch")
            return
        }
        #expect(announced != computed)
    }

    @Test func oversizeCompatStreamIsRefusedAsSoonAsItPassesTheLimit() {
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: 50))
        let values = Array(repeating: [UInt8](repeating: 0x61, count: 20), count: 10)
        var accepted = 0
        var caught: ReceiveError?
        for value in values {
            do {
                _ = try receiver.receive(value)
                accepted += 1
            } catch {
                caught = error
                break
            }
        }
        #expect(accepted == 2)
        #expect(caught == .compatMessageTooLarge(limit: 50))
        #expect(receiver.bufferedByteCount == 0)
    }

    @Test func compatExactlyAtTheLimitIsAccepted() throws {
        let payload = [UInt8](repeating: 0x62, count: 50)
        let values = allValues(MessageSender(payload: payload, format: .compat, maximumValueLength: 20))
        #expect(try reassemble(values, limits: TransferLimits(maximumMessageSize: 50))?.payload == payload)
    }

    @Test func compatBufferNeverGrowsPastTheLimit() throws {
        let limit = 1000
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: limit))
        for _ in 0..<50 {
            _ = try receiver.receive([UInt8](repeating: 1, count: 20))
            #expect(receiver.bufferedByteCount <= limit)
        }
    }

    @Test func unknownVersionIsRefusedAsSoonAsItArrives() {
        var receiver = MessageReceiver(sentHello: hello)
        #expect(firstError(sequenced([FramedHeader.magic + [2]]), receiver: &receiver) == .unsupportedVersion(2))
        #expect(ReceiveError.unsupportedVersion(2).description.contains("version 2"))
    }

    @Test func headerForAnotherSessionIsRefused() {
        var receiver = MessageReceiver(sentHello: hello)
        let other = SessionID(rawValue: 1)
        #expect(firstError(sequenced([header(length: 0, session: other)]), receiver: &receiver)
            == .sessionMismatch(expected: hello.session, received: other))
        // Refused as soon as the session id is in, before the rest of the header.
        var early = MessageReceiver(sentHello: hello)
        #expect(firstError(sequenced([Array(header(length: 0, session: other).prefix(18))]), receiver: &early)
            == .sessionMismatch(expected: hello.session, received: other))
    }

    @Test func valueAfterEOMIsRefused() {
        var receiver = MessageReceiver()
        #expect(firstError([[1], WireFormat.endOfMessage, [2]], receiver: &receiver) == .valueAfterEndOfMessage)
    }

    @Test func failureIsTerminal() {
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: 1))
        #expect(firstError([[1, 2]], receiver: &receiver) == .compatMessageTooLarge(limit: 1))
        // A later EOM does not turn the refused stream into a message.
        #expect(firstError([WireFormat.endOfMessage], receiver: &receiver) == .compatMessageTooLarge(limit: 1))
        #expect(receiver.finishWithoutEOM() == .compatMessageTooLarge(limit: 1))
        #expect(!receiver.isComplete)
    }

    @Test func finishWithoutEOMReportsWhatWasMissing() throws {
        var nothing = MessageReceiver()
        #expect(nothing.finishWithoutEOM() == .missingEndOfMessage(received: 0, announced: nil))

        var compat = MessageReceiver()
        _ = try compat.receive([1, 2, 3, 4])
        #expect(compat.finishWithoutEOM() == .missingEndOfMessage(received: 4, announced: nil))
        #expect(firstError([WireFormat.endOfMessage], receiver: &compat) == .missingEndOfMessage(received: 4, announced: nil))

        var framed = MessageReceiver(sentHello: hello)
        let values = framedValues([UInt8](repeating: 3, count: 100))
        for value in values.prefix(4) { _ = try framed.receive(value) }
        // 4 values of 18 stream bytes: the 57-byte header and 15 payload bytes.
        #expect(framed.finishWithoutEOM() == .missingEndOfMessage(received: 15, announced: 100))

        var halfHeader = MessageReceiver(sentHello: hello)
        _ = try halfHeader.receive(values[0])
        #expect(halfHeader.finishWithoutEOM() == .missingEndOfMessage(received: 0, announced: nil))

        var done = MessageReceiver()
        _ = try done.receive(WireFormat.endOfMessage)
        #expect(done.isComplete)
        #expect(done.finishWithoutEOM() == nil)
    }

    @Test func compatPeerIgnoringHelloWithMagicLookalikeIsRefusedNotMisdelivered() {
        // Residual ambiguity, documented: a binary compat payload that starts with sequence
        // number 0 and the magic.
        var receiver = MessageReceiver(sentHello: hello)
        let payload = [0, 0] + FramedHeader.magic + [1] + [UInt8](repeating: 0, count: 60)
        let error = firstError(appleStyleValues(payload), receiver: &receiver)
        #expect(error != nil)
    }

    @Test func compatPayloadStartingWithTheBareMagicIsCompat() throws {
        let payload = FramedHeader.magic + [1] + [UInt8](repeating: 0, count: 60)
        let message = try reassemble(appleStyleValues(payload), hello: hello)
        #expect(message?.format == .compat)
        #expect(message?.payload == payload)
    }

    @Test func firstValueShorterThanTheMagicIsCompat() throws {
        let message = try reassemble([Array(FramedHeader.magic.prefix(7)), [1], WireFormat.endOfMessage], hello: hello)
        #expect(message?.format == .compat)
        #expect(message?.payload == Array(FramedHeader.magic.prefix(7)) + [1])
    }

    @Test func emptyValuesAreHarmless() throws {
        #expect(try reassemble([[], [1], [], WireFormat.endOfMessage])?.payload == [1])
    }

    @Test func errorsHaveOneLineDescriptions() {
        let errors: [ReceiveError] = [
            .announcedLengthExceedsLimit(announced: 5, limit: 4), .dataAfterAnnouncedLength(announced: 3),
            .truncatedHeader(receivedBytes: 2), .truncatedPayload(received: 1, announced: 2),
            .missingEndOfMessage(received: 1, announced: 2), .missingEndOfMessage(received: 1, announced: nil),
            .digestMismatch(announced: [1], computed: [2]), .compatMessageTooLarge(limit: 9), .unsupportedVersion(7),
            .sessionMismatch(expected: SessionID(rawValue: 1), received: SessionID(rawValue: 2)),
            .valueAfterEndOfMessage, .duplicateValue(sequence: 3),
            .reorderWindowExceeded(sequence: 300, expected: 2), .malformedFramedValue(length: 1),
            .missingStartOfMessage(valuesReceived: 4),
        ]
        for error in errors {
            #expect(!error.description.isEmpty && !error.description.contains("\n"))
        }
        #expect(Set(errors.map(\.description)).count == errors.count)
    }
}
