import PropertyBased
import Testing
@testable import Transfer

/// chunk → reassemble is the identity for every sample payload, every ATT MTU and both formats.
@Suite struct RoundTripTests {
    static let allMTUs = Array(23...517)

    @Test(arguments: MessageSender.Format.allCases)
    func identityForEveryPayloadAndMTU(format: MessageSender.Format) throws {
        let hello = Hello(session: SessionID(rawValue: 0x0123_4567_89AB_CDEF))
        for (name, payload) in samplePayloads {
            let message = OutgoingMessage(payload: payload)
            for mtu in Self.allMTUs {
                let valueLength = WireFormat.valueLength(forATTMTU: mtu)
                let sender = MessageSender(
                    message: message, replyingTo: format == .framed ? hello : nil, maximumValueLength: valueLength)
                let values = allValues(sender)

                #expect(values.count == sender.valueCount, "\(name) at MTU \(mtu)")
                #expect(values.last == WireFormat.endOfMessage, "\(name) at MTU \(mtu)")
                for value in values.dropLast() {
                    #expect(value != WireFormat.endOfMessage, "\(name) at MTU \(mtu): data value equals EOM")
                    #expect(value.count <= mtu - 3 && !value.isEmpty, "\(name) at MTU \(mtu): value of \(value.count)")
                }
                // Only the last data value may be shorter than a full one (or the split tail).
                let shortValues = values.dropLast().filter { $0.count < valueLength }.count
                #expect(shortValues <= 2, "\(name) at MTU \(mtu)")

                // A bletransfer peripheral answers compat only to a central that wrote no HELLO.
                let received = try reassemble(values, hello: format == .framed ? hello : nil)
                #expect(received?.payload == payload, "\(name) at MTU \(mtu)")
                #expect(received?.format == format, "\(name) at MTU \(mtu)")
                if format == .framed {
                    #expect(received?.digest == message.digest)
                    #expect(received?.session == hello.session)
                }
            }
        }
    }

    @Test func compatReceiverWithoutHelloAcceptsAnyCompatStream() throws {
        for (name, payload) in samplePayloads {
            for mtu in [23, 185, 517] {
                let sender = MessageSender(payload: payload, format: .compat, maximumValueLength: mtu - 3)
                #expect(try reassemble(allValues(sender))?.payload == payload, "\(name) at MTU \(mtu)")
            }
        }
    }

    /// Apple's Objective-C sample sends 20-byte values; its Swift sample the central's maximum
    /// update length. Our receiver takes both and yields the same bytes as our own chunking.
    @Test func appleStyleChunkingGivesTheSameBytes() throws {
        for (name, payload) in samplePayloads {
            let ours = try reassemble(allValues(MessageSender(payload: payload, format: .compat, maximumValueLength: 20)))
            #expect(ours?.payload == payload, "\(name)")
            for chunkSize in [20, 182, 244, 512] {
                let values = appleStyleValues(payload, chunkSize: chunkSize)
                // Apple's sender emits a data value "EOM" when the tail happens to be those 3
                // bytes; no compat receiver can tell it from the end marker (ours never sends one).
                if values.dropLast().contains(WireFormat.endOfMessage) { continue }
                let theirs = try reassemble(values)
                #expect(theirs?.payload == payload, "\(name), Apple-style \(chunkSize)-byte values")
                #expect(theirs?.payload == ours?.payload)
            }
            // A central that wrote HELLO to a peer that ignores it (Apple's sample) still gets
            // compat, unless the payload begins with sequence number 0 and the framed magic
            // (documented ambiguity) or is empty: a lone EOM may have overtaken a framed value.
            let appleValues = appleStyleValues(payload)
            if payload.starts(with: [0, 0] + FramedHeader.magic) || appleValues.dropLast().contains(WireFormat.endOfMessage) {
                continue
            }
            if payload.isEmpty {
                var receiver = MessageReceiver(sentHello: Hello(session: SessionID(rawValue: 9)))
                #expect(try receiver.receive(WireFormat.endOfMessage) == .progress(TransferProgress(bytesSoFar: 0, totalBytes: nil)))
                #expect(receiver.isUndecidedAfterEndOfMessage)
                // Settled after the wait, it is the empty compat message it was.
                var settled = receiver
                #expect(try settled.settleAsCompat() == .complete(ReceivedMessage(payload: [], format: .compat)))
                // Ended without the wait, nothing is claimed.
                #expect(receiver.finishWithoutEOM() == .missingStartOfMessage(valuesReceived: 1))
                continue
            }
            let withHello = try reassemble(appleValues, hello: Hello(session: SessionID(rawValue: 9)))
            #expect(withHello?.payload == payload, "\(name)")
            #expect(withHello?.format == .compat, "\(name)")
        }
    }

    @Test func textSplitInsideAMultiByteCharacterSurvives() throws {
        let text = "ab€" + String(repeating: "日本", count: 20) + "👩‍👩‍👧"
        let bytes = Array(text.utf8)
        // Cut inside the 3-byte "€" (bytes 2...4) and everywhere else.
        for cut in 1..<bytes.count {
            let values = [Array(bytes[..<cut]), Array(bytes[cut...]), WireFormat.endOfMessage]
            let message = try reassemble(values)
            #expect(message?.text == text, "cut at \(cut)")
        }
    }

    @Test func invalidUTF8HasNoText() throws {
        let message = try reassemble([[0x61, 0xE2, 0x82], WireFormat.endOfMessage])
        #expect(message?.payload == [0x61, 0xE2, 0x82])
        #expect(message?.text == nil)
        #expect(try reassemble([WireFormat.endOfMessage])?.text == "")
    }

    @Test func randomPayloadsRoundTripAtRandomMTUs() async {
        await propertyCheck(
            count: 300,
            input: Gen.uint8().array(of: 0...3000), Gen.int(in: 23...517), Gen.bool, Gen.uint64()
        ) { payload, mtu, framed, session throws in
            let hello = Hello(session: SessionID(rawValue: session))
            let sender = MessageSender(
                message: OutgoingMessage(payload: payload), replyingTo: framed ? hello : nil,
                maximumValueLength: mtu - 3)
            let values = allValues(sender)
            #expect(values.dropLast().allSatisfy { $0 != WireFormat.endOfMessage && $0.count <= mtu - 3 })
            if !framed, try reassemble(values, hello: hello) == nil {
                // A peer that ignored our HELLO may send a compat message every value of which
                // could be a framed value that overtook value 0: an empty one (a lone EOM), or
                // one whose values all start 00 01…00 FF. The receiver waits, and the role
                // settles it as compat after a pause (docs/wire-formats.md, "Detection").
                #expect(payload.isEmpty || payload.first == 0)
                var receiver = MessageReceiver(sentHello: hello)
                for value in values { _ = try receiver.receive(value) }
                #expect(try receiver.settleAsCompat() == .complete(ReceivedMessage(payload: payload, format: .compat)))
                #expect(try reassemble(values, hello: nil)?.payload == payload)
            } else {
                #expect(try reassemble(values, hello: hello)?.payload == payload)
            }
        }
    }

    @Test func randomTextRoundTripsAsText() async {
        let characters = Gen.oneOf(
            Gen.character(in: "a"..."z"), Gen.character(in: "à"..."ÿ"), Gen.character(in: "一"..."龥"),
            Gen.character(in: "😀"..."🙏"))
        await propertyCheck(count: 200, input: characters.string(of: 0...400), Gen.int(in: 23...517)) { text, mtu throws in
            let sender = MessageSender(payload: Array(text.utf8), format: .compat, maximumValueLength: mtu - 3)
            #expect(try reassemble(allValues(sender))?.text == text)
        }
    }

    /// A receiver must accept a compat sender with any value sizes, including tiny ones.
    @Test func arbitraryValueBoundariesReassemble() async {
        await propertyCheck(
            count: 300, input: Gen.uint8().array(of: 0...2000), Gen.int(in: 1...600).array(of: 1...40)
        ) { payload, sizes throws in
            var values: [[UInt8]] = []
            var offset = 0
            var index = 0
            while offset < payload.count {
                let size = sizes[index % sizes.count]
                index += 1
                let value = Array(payload[offset..<min(offset + size, payload.count)])
                offset += value.count
                values.append(value)
            }
            // Such a sender could emit a data value "EOM"; that is the one thing compat cannot carry.
            guard !values.contains(WireFormat.endOfMessage) else { return }
            #expect(try reassemble(values + [WireFormat.endOfMessage])?.payload == payload)
        }
    }
}
