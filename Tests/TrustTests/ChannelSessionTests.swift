import Crypto
import TestSupport
import Testing

@testable import Trust

extension SessionPair {
    init(peripheral: HostIdentity, central: HostIdentity, sender: SecureSenderSession, receiver: SecureReceiverSession) {
        self.peripheral = peripheral
        self.central = central
        self.sender = sender
        self.receiver = receiver
    }
}

/// The `channel` capability (docs/wire-v2.md section 6): a session over an LE credit-based
/// L2CAP channel, negotiated in the HELLO written on it and bound into the handshake, with
/// values of up to 8 KiB that never arrive out of order.
@Suite struct ChannelSessionTests {
    static let session: UInt64 = 0x0102_0304_0506_0708

    /// A secure or plain pair whose HELLO offers `offered`; the sender serves it `overChannel`.
    static func pair(payload: [UInt8], valueLength: Int, offered: Capabilities, overChannel: Bool,
                     secure: Bool, wantsMulti: Bool = false) throws -> SessionPair {
        let peripheral = HostIdentity()
        let central = HostIdentity()
        let hello = HelloV2(session: session, offered: offered.union(.secure))
        let digest = Array(SHA256.hash(data: payload))
        let sender = secure
            ? try SecureSenderSession(identity: peripheral, authorizedPeers: authorized(central), hello: hello,
                                      payload: payload, digest: digest, metadata: nil, maximumValueLength: valueLength,
                                      wantsMulti: wantsMulti, overChannel: overChannel)
            : try SecureSenderSession(identity: peripheral, authorizedPeers: .anyKey, hello: hello,
                                      payload: payload, digest: digest, metadata: nil, maximumValueLength: valueLength,
                                      wantsMulti: wantsMulti, overChannel: overChannel)
        let receiver = secure
            ? SecureReceiverSession(identity: central, authorizedPeers: authorized(peripheral), hello: hello,
                                    maximumPayloadLength: 1 << 30, maximumWriteLength: valueLength)
            : SecureReceiverSession(identity: central, authorizedPeers: .anyKey, hello: hello,
                                    maximumPayloadLength: 1 << 30, maximumWriteLength: valueLength)
        return SessionPair(peripheral: peripheral, central: central, sender: sender, receiver: receiver)
    }

    @Test("over a channel: `channel` chosen, values up to the channel's length, the message intact",
          arguments: [0, 1, 8190, 100_000], [true, false])
    func negotiatedAndCarried(size: Int, secure: Bool) throws {
        let payload = testPayload(size, seed: 7)
        var pair = try Self.pair(payload: payload, valueLength: 8192, offered: [.multi, .window, .channel],
                                 overChannel: true, secure: secure)
        #expect(pair.sender.chosen.contains(.channel))
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completedPayload == payload)
        #expect(pair.receiver.overChannel)
        // Long values where the stream has the bytes for them; never longer than the channel's.
        #expect(transcript.notified.allSatisfy { $0.count <= 8192 })
        if size >= 100_000 {
            #expect(transcript.notified.contains { $0.count == 8192 })
        }
    }

    @Test("a value length beyond 8 KiB is brought down to it")
    func valueLengthCapped() throws {
        var pair = try Self.pair(payload: testPayload(50_000), valueLength: 65_535, offered: [.channel],
                                 overChannel: true, secure: false)
        let transcript = exchange(&pair)
        #expect(transcript.completedPayload != nil)
        #expect(transcript.notified.map(\.count).max() == SequencedStream.channelValueLengths.upperBound)
    }

    @Test("over GATT the channel's long values are never used, even if a HELLO offers `channel`")
    func gattKeepsAttributeLengths() throws {
        // A sender reached over GATT does not choose `channel`; the central that offered it (it
        // wrote that HELLO on a channel) refuses the answer: it is not the sender it reached.
        var pair = try Self.pair(payload: testPayload(10_000), valueLength: 8192, offered: [.channel],
                                 overChannel: false, secure: false)
        #expect(!pair.sender.chosen.contains(.channel))
        #expect(pair.sender.nextValue()?.count ?? 0 <= 512)
        var fresh = try Self.pair(payload: testPayload(10_000), valueLength: 8192, offered: [.channel],
                                  overChannel: false, secure: false)
        let transcript = exchange(&fresh)
        #expect(transcript.receiverError == .protocolViolation("the sender did not choose the channel it was reached on"))
        #expect(transcript.completedPayload == nil)
    }

    @Test("a HELLO on a channel that does not offer `channel` is refused by the sender", arguments: [true, false])
    func helloWithoutChannelRefused(secure: Bool) throws {
        #expect(throws: SecureSessionError.protocolViolation(
            "a HELLO on an L2CAP channel that does not offer the channel capability")) {
            _ = try Self.pair(payload: [1, 2, 3], valueLength: 8192, offered: [.multi], overChannel: true, secure: secure)
        }
    }

    @Test("a sender that chooses `channel` where the central did not offer it is refused")
    func unofferedChannelRefused() throws {
        // The prefix may only choose what was offered (StreamPrefix), `channel` included.
        let hello = HelloV2(session: Self.session, offered: [.multi])
        var bytes = StreamPrefix(answering: hello, supports: [.multi]).encoded
        bytes[20] |= UInt8(Capabilities.channel.rawValue)
        #expect(throws: StreamPrefix.ParseError.notOffered(.channel)) {
            _ = try StreamPrefix(parsing: bytes, hello: hello)
        }
    }

    @Test("over a channel nothing is reordered: a value out of order ends the session")
    func noReorderingOverAChannel() throws {
        var pair = try Self.pair(payload: testPayload(60_000), valueLength: 4096, offered: [.channel],
                                 overChannel: true, secure: false)
        // The handshake first (every session is encrypted), then the records.
        var handshake: [[UInt8]] = []
        while let value = pair.sender.nextValue() { handshake.append(value) }
        for value in handshake {
            for case .write(let write) in try pair.receive(value) {
                _ = try pair.sender.receiveWrite(write)
            }
        }
        var values: [[UInt8]] = []
        while let value = pair.sender.nextValue() { values.append(value) }
        #expect(values.count > 3)
        _ = try pair.receive(values[0])
        #expect(throws: SecureSessionError.self) {
            _ = try pair.receive(values[2])
        }
    }

    @Test("the channel's reader takes values up to 8 KiB and no longer; GATT's stays at 512")
    func readerLimits() throws {
        var channel = SequencedStreamReader(overChannel: true)
        #expect(try channel.accept([0, 0] + [UInt8](repeating: 1, count: 8190)).first?.count == 8190)
        #expect(throws: SecureSessionError.self) {
            _ = try channel.accept([0, 1] + [UInt8](repeating: 1, count: 8191))
        }
        var gatt = SequencedStreamReader()
        #expect(throws: SecureSessionError.self) {
            _ = try gatt.accept([0, 0] + [UInt8](repeating: 1, count: 511))
        }
    }

    @Test("several messages with the window over a channel: PROGRESS every 16 KiB, the sender within 64 KiB")
    func windowOverAChannel() throws {
        var pair = try Self.pair(payload: testPayload(300_000), valueLength: 8192,
                                 offered: [.multi, .window, .channel], overChannel: true, secure: true)
        #expect(pair.sender.chosen.isSuperset(of: [.window, .channel]))
        let transcript = exchange(&pair)
        #expect(transcript.completedPayload?.count == 300_000)
        let progress = transcript.receiverEvents.filter { if case .progressWrite = $0 { true } else { false } }
        #expect(progress.count >= 300_000 / FlowWindow.reportInterval - 1)
    }
}
