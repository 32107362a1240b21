import Crypto
import DaemonSupport
import Foundation
@testable import Storage
import SystemCalls
import Testing
import TestSupport
import Transfer
@testable import Trust

/// Partial files in a directory for messages of at least `threshold` bytes, as a directory
/// receiver makes them.
struct PartialFilesForTests: PartialPayloadStore {
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

/// A file sent from disk piece by piece and received into a partial file, as the shells do it
/// around the sessions (which read and write no file): the sender's session says which bytes it
/// needs, the receiver's hands out what arrives, the digest is checked on those bytes, and
/// nothing partial is left.
@Suite struct StreamedPayloadTests {
    let hello = HelloV2(session: 0x0102_0304_0506_0708, offered: [.secure, .resume, .window])

    /// What the shells did: the receiving side's kept payload, the sender's failure if any.
    struct Outcome {
        var received: MessagePayload?
        var receiverError: SecureSessionError?
        var sender: SecureSenderSession
    }

    /// Runs one session, the sender reading `body` as its session asks, the receiver keeping
    /// what its session hands out in an `IncomingPayload` from `store`.
    func exchange(_ body: MessagePayload, digest: [UInt8], store: PartialFilesForTests) async throws -> Outcome {
        let peripheral = HostIdentity(), central = HostIdentity()
        var sender = try SecureSenderSession(identity: peripheral, authorizedPeers: .anyKey, hello: hello, payload: body,
                                             digest: digest, metadata: nil, maximumValueLength: 244)
        var receiver = SecureReceiverSession(identity: central, authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 30, maximumWriteLength: 244)
        var incoming: IncomingPayload?
        var outcome = Outcome(sender: sender)
        for _ in 0..<100_000 {
            var writes: [[UInt8]] = []
            while let value = sender.nextValue() {
                let events: [SecureReceiverSession.Event]
                do { events = try receiver.receiveNotification(value) } catch {
                    outcome.receiverError = error
                    outcome.sender = sender
                    return outcome
                }
                for event in events {
                    switch event {
                    case .header(let header): incoming = try await IncomingPayload.make(length: header.payloadLength, in: store)
                    case .appended(let offset, let bytes): try await incoming?.write(bytes, at: offset)
                    case .write(let write), .progressWrite(let write): writes.append(write)
                    case .complete:
                        outcome.received = incoming?.payload
                        writes += try receiver.acknowledgement(outcome: 0)
                    default: break
                    }
                }
            }
            if let wanted = sender.payloadWanted {
                do { sender.providePayload(try body.bytes(in: wanted), at: wanted.lowerBound) } catch {
                    sender.payloadUnreadable(error.description)
                }
                continue
            }
            if writes.isEmpty { break }
            for write in writes { _ = try sender.receiveWrite(write) }
        }
        outcome.sender = sender
        return outcome
    }

    private func file(_ bytes: [UInt8], in directory: String) throws -> String {
        let path = directory + "/source.bin"
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    private func entries(_ directory: String) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
    }

    private func scratch() throws -> String {
        let path = NSTemporaryDirectory() + "streamed-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func aFileGoesFromDiskIntoAPartialFileAndVerifies() async throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let partials = directory + "/partials"
        try FileManager.default.createDirectory(atPath: partials, withIntermediateDirectories: true)
        let bytes = randomBytes(300_001, seed: 7)
        let (message, status) = try OutgoingMessage.ofFile(at: try file(bytes, in: directory))
        #expect(Int(status.st_size) == bytes.count)
        #expect(message.digest == Array(SHA256.hash(data: bytes)))
        #expect(message.body.file != nil)

        var outcome: Outcome? = try await exchange(message.body, digest: message.digest,
                                                   store: PartialFilesForTests(directory: partials, threshold: 1))
        let received = try #require(outcome?.received)
        #expect(received.file != nil, "a message over the threshold is written to a partial file, not held")
        #expect(received.count == bytes.count)
        #expect(try received.loadedBytes() == bytes)
        #expect(entries(partials).count == 1)
        outcome = nil
        _ = consume received
        #expect(entries(partials).isEmpty, "a partial file that was never linked goes when released")
    }

    @Test func aMessageBelowTheThresholdStaysInMemory() async throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = randomBytes(5_000, seed: 8)
        let outcome = try await exchange(MessagePayload(bytes), digest: Array(SHA256.hash(data: bytes)),
                                         store: PartialFilesForTests(directory: directory, threshold: 10_000))
        let received = try #require(outcome.received)
        #expect(received.file == nil)
        #expect(try received.loadedBytes() == bytes)
        #expect(entries(directory).isEmpty)
    }

    @Test func aPartialFileOfAMessageThatFailsIsRemoved() async throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = randomBytes(50_000, seed: 9)
        // The announced digest is not the payload's: END fails verification.
        var wrong = Array(SHA256.hash(data: bytes))
        wrong[0] ^= 1
        let outcome = try await exchange(MessagePayload(bytes), digest: wrong,
                                         store: PartialFilesForTests(directory: directory, threshold: 1))
        #expect(outcome.receiverError == .digestMismatch)
        #expect(outcome.received == nil)
        #expect(entries(directory).isEmpty, "nothing of a message that did not verify is left")
    }

    @Test func aFileThatShrinksWhileSentEndsTheSessionWithoutItsEnd() async throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let bytes = randomBytes(100_000, seed: 10)
        let path = try file(bytes, in: directory)
        let (message, _) = try OutgoingMessage.ofFile(at: path)
        #expect(truncate(path, 40_000) == 0)
        var outcome = try await exchange(message.body, digest: message.digest,
                                         store: PartialFilesForTests(directory: directory, threshold: 1))
        #expect(outcome.received == nil, "the receiver gets no END, so it keeps nothing")
        guard case .payloadUnreadable(let reason) = outcome.sender.localFailure else {
            Issue.record("the sender should say its file could not be read, not \(String(describing: outcome.sender.localFailure))")
            return
        }
        #expect(reason.contains("became shorter"))
        #expect(outcome.sender.nextValue() == nil)
    }

    @Test func theDigestOfAFileIsTheDigestOfItsBytes() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for count in [0, 1, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) - 5] {
            let bytes = randomBytes(count, seed: UInt64(count))
            let (message, _) = try OutgoingMessage.ofFile(at: try file(bytes, in: directory))
            #expect(message.digest == Array(SHA256.hash(data: bytes)), "\(count) bytes")
            #expect(message.byteCount == count)
        }
    }

    @Test func aDirectoryOrAMissingFileIsNotAMessage() throws {
        let directory = try scratch()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(throws: PayloadReadError.self) { try OutgoingMessage.ofFile(at: directory) }
        #expect(throws: PayloadReadError.self) { try OutgoingMessage.ofFile(at: directory + "/none") }
    }
}
