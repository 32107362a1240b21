import Transfer
import Crypto
import TestSupport
import Testing

@testable import Trust

/// Resuming a message from the receiver's checkpoint (`resume`, docs/wire-v2.md section 5):
/// RESUME at once on a matching HEADER, DATA skipped below the held offset, the whole SHA-256
/// deciding, and the sender's bounds on RESUME.
@Suite struct SecureResumeSessionTests {
    static let valueLength = 182
    static let offered: Capabilities = [.secure, .resume]

    /// Feeds the sender's values one at a time and the receiver's writes back right after
    /// each value (a link whose round trip is one value), until neither side has more.
    /// `forge` may replace the receiver's writes (by the count of values notified so far).
    static func interleaved(_ pair: inout SessionPair, forge: ((Int, inout SecureReceiverSession) throws(SecureSessionError) -> [[UInt8]]?)? = nil)
        -> Transcript {
        var transcript = Transcript()
        while !transcript.failed, let value = pair.sender.nextValue() {
            transcript.notified.append(value)
            var writes: [[UInt8]] = []
            do throws(SecureSessionError) {
                let events = try pair.receive(value)
                transcript.receiverEvents += events
                for event in events {
                    switch event {
                    case .write(let value), .progressWrite(let value): writes.append(value)
                    case .complete: writes += try pair.receiver.acknowledgement(outcome: 0)
                    default: break
                    }
                }
                if let forged = try forge?(transcript.notified.count, &pair.receiver) { writes += forged }
            } catch {
                transcript.receiverError = error
            }
            transcript.written += writes
            do throws(SecureSessionError) {
                for write in writes { transcript.senderEvents += try pair.sender.receiveWrite(write) }
            } catch {
                transcript.senderError = error
            }
        }
        transcript.completed = pair.kept.completed
        return transcript
    }

    static func pair(payload: [UInt8], held: [UInt8], offered: Capabilities = offered) throws -> SessionPair {
        try SessionPair(payload: payload, valueLength: valueLength, offered: offered, heldPrefix: { _, _ in held })
    }

    @Test(arguments: [1, 4_096, 10_000, 39_999])
    func resumesFromTheHeldOffsetAndSkipsWhatIsHeld(heldCount: Int) throws {
        let payload = testPayload(40_000)
        let held = Array(payload[..<heldCount])
        var pair = try Self.pair(payload: payload, held: held)
        #expect(pair.sender.chosen.contains(.resume))
        let transcript = Self.interleaved(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completedPayload == payload)
        #expect(transcript.receiverEvents.contains(.resumed(offset: heldCount)))
        #expect(transcript.senderEvents.contains(.resumed(offset: UInt64(heldCount))))
        #expect(transcript.senderEvents.contains(.acknowledged(alreadyStored: false)))
        // Only the bytes after the held ones are appended, contiguously from the held offset.
        let appended = transcript.appended
        #expect(appended.first?.offset == heldCount)
        #expect(appended.flatMap(\.bytes) == Array(payload[heldCount...]))
        // The sender skipped ahead within about a round trip: at most two records more than
        // the rest of the message went on the air.
        #expect(pair.sender.payloadBytesNotified <= payload.count - heldCount + 2 * RecordMessage.dataBytesPerRecord)
        #expect(pair.sender.payloadBytesNotified >= payload.count - heldCount)
        #expect(pair.sender.resumedAt == UInt64(heldCount))
    }

    @Test func resumesWithTheWholeMessageHeld() throws {
        let payload = testPayload(20_000)
        var pair = try Self.pair(payload: payload, held: payload)
        let transcript = Self.interleaved(&pair)
        #expect(transcript.completedPayload == payload)
        #expect(transcript.receiverEvents.contains(.resumed(offset: payload.count)))
        #expect(transcript.appended.isEmpty)
        #expect(pair.sender.payloadBytesNotified <= 2 * RecordMessage.dataBytesPerRecord)
    }

    @Test func noCheckpointWritesNoResumeAndSendsEverything() throws {
        let payload = testPayload(20_000)
        var pair = try Self.pair(payload: payload, held: [])
        let transcript = Self.interleaved(&pair)
        #expect(transcript.completedPayload == payload)
        #expect(!transcript.receiverEvents.contains { if case .resumed = $0 { true } else { false } })
        #expect(pair.sender.payloadBytesNotified == payload.count)
        #expect(pair.sender.resumedAt == nil)
    }

    @Test func withoutTheOfferNothingIsResumed() throws {
        let payload = testPayload(20_000)
        var pair = try Self.pair(payload: payload, held: Array(payload[..<10_000]), offered: [.secure])
        #expect(!pair.sender.chosen.contains(.resume))
        let transcript = Self.interleaved(&pair)
        #expect(transcript.completedPayload == payload)
        #expect(!transcript.receiverEvents.contains { if case .resumed = $0 { true } else { false } })
        #expect(transcript.appended.flatMap(\.bytes) == payload)
        #expect(pair.sender.payloadBytesNotified == payload.count)
    }

    @Test func aBadCheckpointIsRefusedWithAck03() throws {
        let payload = testPayload(30_000)
        var held = Array(payload[..<12_000])
        held[5] ^= 0xFF
        var pair = try Self.pair(payload: payload, held: held)
        let transcript = Self.interleaved(&pair)
        #expect(transcript.completedPayload == nil)
        #expect(transcript.receiverEvents.contains { if case .refusedDigestMismatch = $0 { true } else { false } })
        #expect(transcript.senderEvents.contains(.refusedByCentral(outcome: 0x03)))
        #expect(pair.sender.state == .failed)
        // The session is over for the receiver.
        #expect(throws: SecureSessionError.digestMismatch) { _ = try pair.receive([0, 0x7F, 1, 2]) }
    }

    @Test func aCheckpointLongerThanTheMessageIsIgnored() throws {
        let payload = testPayload(5_000)
        var pair = try Self.pair(payload: payload, held: testPayload(6_000))
        let transcript = Self.interleaved(&pair)
        #expect(transcript.completedPayload == payload)
        #expect(!transcript.receiverEvents.contains { if case .resumed = $0 { true } else { false } })
    }

    /// A sealed RESUME forged by the receiver side with the given content, once the sender has
    /// handed out `afterValues` values.
    static func forgedResume(afterValues: Int, message: UInt32, offset: UInt64, times: Int = 1)
        -> (Int, inout SecureReceiverSession) throws(SecureSessionError) -> [[UInt8]]? {
        { notified, receiver throws(SecureSessionError) in
            guard notified == afterValues else { return nil }
            var writes: [[UInt8]] = []
            for _ in 0..<times { writes += try receiver.forgeRecord(.resume(message: message, offset: offset)) }
            return writes
        }
    }

    /// The reason of the protocol violation `error` should be; records an issue for anything else.
    static func violationReason(_ error: SecureSessionError?, sourceLocation: SourceLocation = #_sourceLocation) -> String? {
        guard case .protocolViolation(let reason) = error else {
            Issue.record("expected a protocol violation, got \(String(describing: error))", sourceLocation: sourceLocation)
            return nil
        }
        return reason
    }

    /// A RESUME the sender must not accept, and what its refusal says.
    struct BadResume: Sendable, CustomTestStringConvertible {
        let testDescription: String
        var offered: Capabilities = SecureResumeSessionTests.offered
        var message: UInt32 = 0
        let offset: UInt64
        var times = 1
        let reason: String
    }

    @Test("a RESUME the sender cannot honour ends the session", arguments: [
        BadResume(testDescription: "beyond the length", offset: 20_001, reason: "beyond"),
        BadResume(testDescription: "twice", offset: 100, times: 2, reason: "twice"),
        BadResume(testDescription: "for another message", message: 1, offset: 100, reason: "message 1"),
        BadResume(testDescription: "without the capability", offered: [.secure], offset: 100, reason: "not chosen"),
    ])
    func badResumeEndsTheSession(_ resume: BadResume) throws {
        let payload = testPayload(20_000)
        var pair = try Self.pair(payload: payload, held: [], offered: resume.offered)
        let forge = Self.forgedResume(afterValues: 4, message: resume.message, offset: resume.offset, times: resume.times)
        let transcript = Self.interleaved(&pair, forge: forge)
        let reason = try #require(Self.violationReason(transcript.senderError))
        #expect(reason.contains(resume.reason))
        #expect(pair.sender.state == .failed)
        #expect(pair.sender.nextValue() == nil)
    }

    @Test func aForgedResumeMakesTheReceiverRefuseTheJump() throws {
        // The sender skips ahead on a RESUME the receiver (holding nothing) never wrote: the
        // receiver sees DATA at an unexpected offset and ends the session; nothing is stored.
        let payload = testPayload(40_000)
        var pair = try Self.pair(payload: payload, held: [])
        let transcript = Self.interleaved(&pair, forge: Self.forgedResume(afterValues: 4, message: 0, offset: 30_000))
        #expect(transcript.completedPayload == nil)
        #expect(Self.violationReason(transcript.receiverError)?.contains("DATA at offset 30000") == true)
    }

    @Test func multiResumesEachMessageOnItsOwn() throws {
        let first = testPayload(12_000, seed: 1)
        let second = testPayload(15_000, seed: 2)
        let secondDigest = Array(SHA256.hash(data: second))
        // Only the second message has a checkpoint.
        var pair = try SessionPair(payload: first, valueLength: Self.valueLength, offered: [.secure, .multi, .resume],
                                   wantsMulti: true,
                                   heldPrefix: { _, header in header.digest == secondDigest ? Array(second[..<7_000]) : [] })
        var transcript = Transcript()
        var sentSecond = false
        for _ in 0..<10_000 {
            var step = Self.interleaved(&pair)
            transcript.receiverEvents += step.receiverEvents
            transcript.senderEvents += step.senderEvents
            step.receiverEvents = []
            #expect(step.receiverError == nil && step.senderError == nil)
            guard pair.sender.state == .acknowledged, !pair.sender.endOfMessageSent else { break }
            if sentSecond {
                try pair.sender.finish()
            } else {
                try pair.sender.sendNext(payload: second, digest: secondDigest, metadata: nil)
                sentSecond = true
            }
        }
        let completed = pair.kept.completed.map(\.bytes)
        #expect(completed == [first, second])
        #expect(transcript.receiverEvents.filter { if case .resumed = $0 { true } else { false } } == [.resumed(offset: 7_000)])
        #expect(pair.sender.payloadBytesNotified < first.count + second.count - 7_000 + 2 * RecordMessage.dataBytesPerRecord)
    }
}
