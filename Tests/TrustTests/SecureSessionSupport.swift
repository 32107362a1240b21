import Transfer
import Crypto
import Foundation
import Testing
import TestSupport

@testable import Trust

func authorized(_ identities: HostIdentity...) -> AuthorizedPeers {
    AuthorizedPeers(identities.enumerated().map { AuthorizedPeers.Peer(key: $1.publicKey, name: "peer\($0)", line: $0 + 1) })
}

func testPayload(_ count: Int, seed: UInt64 = 1) -> [UInt8] {
    randomBytes(count, seed: seed)
}

/// The checkpoint a test's central holds for a message (empty: none).
typealias HeldPrefix = @Sendable (PeerKey?, MessageHeader) -> [UInt8]

/// What a central's shell does with its session's payload, for tests: keeps the bytes handed
/// out at their offsets, answers a checkpoint query from `held` (its bytes put first), and
/// remembers each completed message's bytes.
struct KeptPayloads {
    var held: HeldPrefix?
    private var current: [UInt8] = []
    var completed: [(header: MessageHeader, bytes: [UInt8])] = []

    init(held: HeldPrefix? = nil) { self.held = held }

    /// `events` as the session gave them, followed by what answering its checkpoint query adds.
    mutating func take(_ events: [SecureReceiverSession.Event],
                       session: inout SecureReceiverSession) throws(SecureSessionError) -> [SecureReceiverSession.Event] {
        var all: [SecureReceiverSession.Event] = []
        for event in events {
            all.append(event)
            switch event {
            case .header:
                current = []
            case .appended(let offset, let bytes):
                if offset > current.count { current += [UInt8](repeating: 0, count: offset - current.count) }
                current.replaceSubrange(offset..<min(current.count, offset + bytes.count), with: bytes)
            case .checkpointWanted(let header):
                guard let bytes = held?(session.remotePeer?.key, header), !bytes.isEmpty else { continue }
                var digest = RunningDigest()
                digest.update(bytes)
                let answered = try session.resume(heldBytes: bytes.count, digest: digest)
                if !answered.isEmpty { current = bytes }
                all += answered
            case .complete(let header):
                completed.append((header, current))
            default:
                break
            }
        }
        return all
    }
}

/// Both ends of one session between fresh identities that authorize each other (unless told
/// otherwise).
struct SessionPair {
    let peripheral: HostIdentity
    let central: HostIdentity
    var sender: SecureSenderSession
    var receiver: SecureReceiverSession
    /// The central's shell: where the bytes handed out go.
    var kept = KeptPayloads()

    /// One notification value to the central, as its shell handles it.
    mutating func receive(_ value: [UInt8]) throws(SecureSessionError) -> [SecureReceiverSession.Event] {
        try kept.take(receiver.receiveNotification(value), session: &receiver)
    }

    init(
        payload: [UInt8], valueLength: Int, metadata: FileMetadata? = nil,
        offered: Capabilities = [.secure], maximumPayloadLength: Int = 1 << 30,
        peripheral: HostIdentity = HostIdentity(), central: HostIdentity = HostIdentity(),
        senderPeers: AuthorizedPeers? = nil, receiverPeers: AuthorizedPeers? = nil,
        wantsMulti: Bool = false, heldPrefix: HeldPrefix? = nil
    ) throws {
        kept = KeptPayloads(held: heldPrefix)
        self.peripheral = peripheral
        self.central = central
        let hello = HelloV2(session: 0x0102_0304_0506_0708, offered: offered)
        sender = try SecureSenderSession(
            identity: peripheral, authorizedPeers: senderPeers ?? authorized(central), hello: hello,
            payload: payload, digest: Array(SHA256.hash(data: payload)), metadata: metadata,
            maximumValueLength: valueLength, wantsMulti: wantsMulti)
        receiver = SecureReceiverSession(
            identity: central, authorizedPeers: receiverPeers ?? authorized(peripheral), hello: hello,
            maximumPayloadLength: maximumPayloadLength, maximumWriteLength: valueLength)
    }
}

/// What one exchange produced on both sides.
struct Transcript {
    var notified: [[UInt8]] = []
    var written: [[UInt8]] = []
    var receiverEvents: [SecureReceiverSession.Event] = []
    var senderEvents: [SecureSenderSession.Event] = []
    var receiverError: SecureSessionError?
    var senderError: SecureSessionError?

    /// The messages the central completed, with the bytes its shell kept.
    var completed: [(header: MessageHeader, bytes: [UInt8])] = []
    var completedPayload: [UInt8]? { completed.first?.bytes }
    var sawComplete: Bool { completedPayload != nil }
    var sawHeader: Bool { receiverEvents.contains { if case .header = $0 { true } else { false } } }
    var sawEndOfStream: Bool { receiverEvents.contains(.endOfStream) }
    var failed: Bool { receiverError != nil || senderError != nil }
    /// The bytes the receiver appended, in order, as a checkpoint would hold them.
    var appended: [(offset: Int, bytes: [UInt8])] {
        receiverEvents.compactMap { if case .appended(let offset, let bytes) = $0 { (offset, bytes) } else { nil } }
    }
}

/// Shuffles `values` in blocks of `block` consecutive values: none gets further than
/// `block − 1` ahead of the next needed one, well within the reorder window.
func shuffledWithinWindow(_ values: [[UInt8]], block: Int = 64, using generator: inout SeededGenerator) -> [[UInt8]] {
    stride(from: 0, to: values.count, by: block).flatMap { start in
        values[start..<min(start + block, values.count)].shuffled(using: &generator)
    }
}

/// Feeds every value of one side into the other until neither has anything more. The receiver
/// acknowledges `.complete` with `ackOutcome`. `tamper` may change a notification value (by its
/// index in the order sent) or drop it (nil); `duplicate` delivers that notification twice.
/// Errors are recorded, not thrown: the exchange stops at the first one.
func exchange(
    _ pair: inout SessionPair, shuffle seed: UInt64? = nil, ackOutcome: UInt8 = 0,
    tamper: ((Int, [UInt8]) -> [UInt8])? = nil, duplicate: Int? = nil,
    ackWrites: ((inout SecureReceiverSession, UInt8) throws(SecureSessionError) -> [[UInt8]])? = nil
) -> Transcript {
    var transcript = Transcript()
    var generator = SeededGenerator(seed: seed ?? 0)
    while transcript.failed == false {
        var batch: [[UInt8]] = []
        while let value = pair.sender.nextValue() {
            let index = transcript.notified.count + batch.count
            batch.append(value)
            if index == duplicate { batch.append(value) }
        }
        if batch.isEmpty { break }
        transcript.notified += batch
        if let tamper { batch = batch.enumerated().map { tamper(transcript.notified.count - batch.count + $0, $1) } }
        if seed != nil { batch = shuffledWithinWindow(batch, using: &generator) }
        var writes: [[UInt8]] = []
        do throws(SecureSessionError) {
            for value in batch {
                let events = try pair.receive(value)
                transcript.receiverEvents += events
                for event in events {
                    switch event {
                    case .write(let value), .progressWrite(let value): writes.append(value)
                    case .complete:
                        if let ackWrites {
                            writes += try ackWrites(&pair.receiver, ackOutcome)
                        } else {
                            writes += try pair.receiver.acknowledgement(outcome: ackOutcome)
                        }
                    default: break
                    }
                }
            }
        } catch {
            transcript.receiverError = error
        }
        transcript.completed = pair.kept.completed
        transcript.written += writes
        if seed != nil { writes = shuffledWithinWindow(writes, using: &generator) }
        do throws(SecureSessionError) {
            for value in writes { transcript.senderEvents += try pair.sender.receiveWrite(value) }
        } catch {
            transcript.senderError = error
        }
    }
    return transcript
}

extension SessionPair {
    /// The session id every test HELLO carries.
    static let testSession: UInt64 = 0x0102_0304_0506_0708

    /// Both ends of one session between keyless hosts: keys made for the run on each side and
    /// any key let in (`AuthorizedPeers.anyKey`): encrypted, authenticating nobody. `offered`
    /// always gains `secure`, as every central offers it.
    init(
        keylessPayload payload: [UInt8], valueLength: Int, metadata: FileMetadata? = nil,
        offered: Capabilities = [], maximumPayloadLength: Int = 1 << 30,
        wantsMulti: Bool = false, heldPrefix: HeldPrefix? = nil
    ) throws {
        kept = KeptPayloads(held: heldPrefix)
        peripheral = HostIdentity()
        central = HostIdentity()
        let hello = HelloV2(session: Self.testSession, offered: offered.union(.secure))
        sender = try SecureSenderSession(
            identity: peripheral, authorizedPeers: .anyKey, hello: hello,
            payload: payload, digest: Array(SHA256.hash(data: payload)), metadata: metadata,
            maximumValueLength: valueLength, wantsMulti: wantsMulti)
        receiver = SecureReceiverSession(
            identity: central, authorizedPeers: .anyKey, hello: hello,
            maximumPayloadLength: maximumPayloadLength, maximumWriteLength: valueLength)
    }
}

/// The bytes of a sequence-numbered stream: the values (in the order sent) without their
/// numbers, the bare `EOM` left out (no stream value is 3 bytes long).
func streamBytes(_ values: [[UInt8]]) -> [UInt8] {
    values.filter { $0 != SequencedStream.endOfMessage }.flatMap { $0.dropFirst(SequencedStream.sequenceLength) }
}

/// The frames `bytes` hold, every byte used.
func frames(in bytes: [UInt8]) throws -> [Frame] {
    var reader = FrameReader()
    let frames = try reader.append(bytes)
    guard reader.bufferedByteCount == 0 else { throw FrameError.tooLong(reader.bufferedByteCount) }
    return frames
}

/// A stream's bytes cut again into sequence-numbered values of `valueLength`, `EOM` last: what
/// a sender would have notified had it sent these bytes.
func sequencedValues(_ bytes: [UInt8], valueLength: Int) -> [[UInt8]] {
    var writer = SequencedStreamWriter(maximumValueLength: valueLength)
    writer.append(bytes)
    writer.flush()
    return writer.drain() + [SequencedStream.endOfMessage]
}

/// A failed expectation on a session shows its state, not every byte it holds.
extension SecureSenderSession: CustomTestStringConvertible {
    public var testDescription: String {
        "SecureSenderSession(\(state), message \(currentMessageNumber), \(unacknowledgedCount) unacknowledged, "
            + "\(acknowledgedCount) acknowledged, chosen \(chosen.rawValue))"
    }
}

extension SecureReceiverSession: CustomTestStringConvertible {
    public var testDescription: String {
        "SecureReceiverSession(\(completedCount) completed, prefix read \(hasReadPrefix), multi \(carriesSeveralMessages), "
            + "pipelines \(pipelines))"
    }
}


extension SecureReceiverSession {
    /// `record` sealed in this session's order: records the receiver would not write.
    mutating func forgeRecord(_ record: RecordMessage) throws(SecureSessionError) -> [[UInt8]] {
        try sealAndDrain([record])
    }
}
