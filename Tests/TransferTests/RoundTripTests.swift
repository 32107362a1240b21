import PropertyBased
import Testing
@testable import Transfer

/// chunk → reassemble (Apple's flow) is the identity for every sample payload and every ATT MTU.
@Suite struct RoundTripTests {
    static let allMTUs = Array(23...517)

    @Test func identityForEveryPayloadAndMTU() throws {
        for (name, payload) in samplePayloads {
            let message = OutgoingMessage(payload: payload)
            for mtu in Self.allMTUs {
                let valueLength = WireFormat.valueLength(forATTMTU: mtu)
                let sender = MessageSender(message: message, maximumValueLength: valueLength)
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
                let received = try reassemble(values)
                #expect(received?.payload == payload && received?.format == .compat, "\(name) at MTU \(mtu)")
            }
        }
    }

    @Test func compatReceiverWithoutHelloAcceptsAnyCompatStream() throws {
        for (name, payload) in samplePayloads {
            for mtu in [23, 185, 517] {
                let sender = MessageSender(payload: payload, maximumValueLength: mtu - 3)
                #expect(try reassemble(allValues(sender))?.payload == payload, "\(name) at MTU \(mtu)")
            }
        }
    }

    /// Apple's Objective-C sample sends 20-byte values; its Swift sample the central's maximum
    /// update length. Our receiver takes both and yields the same bytes as our own chunking.
    @Test func appleStyleChunkingGivesTheSameBytes() throws {
        for (name, payload) in samplePayloads {
            let ours = try reassemble(allValues(MessageSender(payload: payload, maximumValueLength: 20)))
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
        await propertyCheck(count: 300, input: Gen.uint8().array(of: 0...3000), Gen.int(in: 23...517)) { payload, mtu throws in
            let values = allValues(MessageSender(message: OutgoingMessage(payload: payload), maximumValueLength: mtu - 3))
            #expect(values.dropLast().allSatisfy { $0 != WireFormat.endOfMessage && $0.count <= mtu - 3 })
            #expect(try reassemble(values)?.payload == payload)
        }
    }

    @Test func randomTextRoundTripsAsText() async {
        let characters = Gen.oneOf(
            Gen.character(in: "a"..."z"), Gen.character(in: "à"..."ÿ"), Gen.character(in: "一"..."龥"),
            Gen.character(in: "😀"..."🙏"))
        await propertyCheck(count: 200, input: characters.string(of: 0...400), Gen.int(in: 23...517)) { text, mtu throws in
            let sender = MessageSender(payload: Array(text.utf8), maximumValueLength: mtu - 3)
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
