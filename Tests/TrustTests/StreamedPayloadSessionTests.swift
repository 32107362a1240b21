import Crypto
import Foundation
import Testing
import TestSupport
import Transfer

@testable import Trust

/// Partial files in a directory for messages of at least `threshold` bytes, as a directory
/// receiver makes them.
private struct PartialFilesForTests: PartialPayloadStore {
    let directory: String
    let threshold: UInt64

    func makePartialFile(length: UInt64) throws(PayloadReadError) -> PayloadFile? {
        guard length >= threshold else { return nil }
        let path = directory + "/partial-" + UUID().uuidString
        let descriptor = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw PayloadReadError("cannot create \(path)") }
        return PayloadFile(descriptor: descriptor, path: path, removesPathWhenReleased: true)
    }
}

/// A file sent from disk piece by piece, received into a partial file: the bytes that arrive
/// are the file's, the digest is checked on what was written, and nothing partial is left.
@Suite struct StreamedPayloadSessionTests {
    let hello = HelloV2(session: 0x0102_0304_0506_0708, offered: [.secure, .resume, .window])

    private func sessions(sending body: MessagePayload, digest: [UInt8], partials: String,
                          threshold: UInt64 = 1) throws -> SessionPair {
        var pair = try SessionPair(payload: [1], valueLength: 244)
        pair.sender = try SecureSenderSession(
            identity: pair.peripheral, authorizedPeers: authorized(pair.central), hello: hello,
            payload: body, digest: digest, metadata: nil, maximumValueLength: 244)
        pair.receiver = SecureReceiverSession(
            identity: pair.central, authorizedPeers: authorized(pair.peripheral), hello: hello,
            maximumPayloadLength: 1 << 30, maximumWriteLength: 244,
            partialStore: PartialFilesForTests(directory: partials, threshold: threshold))
        return pair
    }

    private func file(_ bytes: [UInt8], in directory: String) throws -> String {
        let path = directory + "/source.bin"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func completed(_ transcript: Transcript) -> MessagePayload? {
        for case .complete(let payload, _) in transcript.receiverEvents { return payload }
        return nil
    }

    private func entries(_ directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    @Test func aFileGoesFromDiskIntoAPartialFileAndVerifies() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let partials = directory + "/partials"
        try FileManager.default.createDirectory(atPath: partials, withIntermediateDirectories: true)
        let bytes = testPayload(300_001, seed: 7)
        let (message, status) = try OutgoingMessage.ofFile(at: try file(bytes, in: directory))
        #expect(Int(status.st_size) == bytes.count)
        #expect(message.digest == Array(SHA256.hash(data: bytes)))
        #expect(message.body.file != nil)

        var pair = try sessions(sending: message.body, digest: message.digest, partials: partials)
        let transcript = exchange(&pair)
        #expect(!transcript.failed)
        let received = try #require(completed(transcript))
        #expect(received.file != nil, "a message over the threshold is written to a partial file, not held")
        #expect(received.count == bytes.count)
        #expect(try received.loadedBytes() == bytes)
        #expect(entries(partials).count == 1)
        pair = try SessionPair(payload: [1], valueLength: 244)
        _ = consume transcript
        _ = consume received
        #expect(entries(partials).isEmpty, "a partial file that was never linked goes when released")
    }

    @Test func aMessageBelowTheThresholdStaysInMemory() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = testPayload(5_000, seed: 8)
        var pair = try sessions(sending: MessagePayload(bytes), digest: Array(SHA256.hash(data: bytes)),
                                partials: directory, threshold: 10_000)
        let transcript = exchange(&pair)
        let received = try #require(completed(transcript))
        #expect(received.file == nil)
        #expect(try received.loadedBytes() == bytes)
        #expect(entries(directory).isEmpty)
    }

    @Test func aPartialFileOfAMessageThatFailsIsRemoved() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = testPayload(50_000, seed: 9)
        // The announced digest is not the payload's: END fails verification.
        var wrong = Array(SHA256.hash(data: bytes))
        wrong[0] ^= 1
        var pair = try sessions(sending: MessagePayload(bytes), digest: wrong, partials: directory)
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == .digestMismatch)
        #expect(completed(transcript) == nil)
        #expect(entries(directory).isEmpty, "nothing of a message that did not verify is left")
    }

    @Test func aFileThatShrinksWhileSentEndsTheSessionWithoutItsEnd() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = testPayload(100_000, seed: 10)
        let path = try file(bytes, in: directory)
        let (message, _) = try OutgoingMessage.ofFile(at: path)
        #expect(truncate(path, 40_000) == 0)
        var pair = try sessions(sending: message.body, digest: message.digest, partials: directory)
        let transcript = exchange(&pair)
        #expect(completed(transcript) == nil, "the receiver gets no END, so it keeps nothing")
        guard case .payloadUnreadable(let reason) = pair.sender.localFailure else {
            Issue.record("the sender should say its file could not be read, not \(String(describing: pair.sender.localFailure))")
            return
        }
        #expect(reason.contains("became shorter"))
        #expect(pair.sender.nextValue() == nil)
    }

    @Test func theDigestOfAFileIsTheDigestOfItsBytes() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for count in [0, 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 5] {
            let bytes = testPayload(count, seed: UInt64(count))
            let (message, _) = try OutgoingMessage.ofFile(at: try file(bytes, in: directory))
            #expect(message.digest == Array(SHA256.hash(data: bytes)), "\(count) bytes")
            #expect(message.byteCount == count)
        }
    }

    @Test func aWindowReaderGivesTheBytesOfAnyRange() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = testPayload(200_000, seed: 11)
        let (message, _) = try OutgoingMessage.ofFile(at: try file(bytes, in: directory))
        var reader = PayloadWindowReader(message.body, windowLength: 4096)
        var generator = SeededGenerator(seed: 3)
        var offset = 0
        // Front to back in value-sized steps, as a sender reads, then random ranges (a RESUME
        // jumps), some longer than the window.
        while offset < bytes.count {
            let end = min(bytes.count, offset + Int.random(in: 1...512, using: &generator))
            #expect(try reader.bytes(in: offset..<end) == Array(bytes[offset..<end]))
            offset = end
        }
        for _ in 0..<200 {
            let start = Int.random(in: 0..<bytes.count, using: &generator)
            let end = min(bytes.count, start + Int.random(in: 0...9000, using: &generator))
            #expect(try reader.bytes(in: start..<end) == Array(bytes[start..<end]))
        }
    }

    @Test func aDirectoryOrAMissingFileIsNotAMessage() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(throws: PayloadReadError.self) { try OutgoingMessage.ofFile(at: directory) }
        #expect(throws: PayloadReadError.self) { try OutgoingMessage.ofFile(at: directory + "/none") }
    }
}
