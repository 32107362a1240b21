import Testing
@testable import Transfer
import TestSupport

/// A deterministic, coverage-free mutation fuzzer over everything a peer controls: notification
/// values (receiver), and what a central writes that the peripheral recognises. It runs in every `swift test`; the
/// libFuzzer harness (scripts/fuzz-transfer.sh) explores further with coverage feedback.
@Suite struct ReceiverMutationFuzzTests {
    static let iterations = 20_000
    static let limit = 4096

    func seedStream(_ generator: inout SeededGenerator) -> [UInt8] {
        let payload = randomBytes(Int.random(in: 0...600, using: &generator), seed: generator.next())
        let sender = MessageSender(message: OutgoingMessage(payload: payload),
                                   maximumValueLength: Int.random(in: 20...512, using: &generator))
        let values = allValues(sender)
        return values.flatMap { [UInt8($0.count >> 8), UInt8($0.count & 0xFF)] + $0 }
    }

    /// Splits fuzz bytes into values: each value is a 2-byte length then that many bytes.
    func values(from bytes: [UInt8]) -> [[UInt8]] {
        var values: [[UInt8]] = []
        var index = 0
        while index + 2 <= bytes.count {
            let length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
            index += 2
            let end = min(bytes.count, index + length)
            values.append(Array(bytes[index..<end]))
            index = end
        }
        return values
    }

    func mutate(_ bytes: inout [UInt8], _ generator: inout SeededGenerator) {
        for _ in 0..<Int.random(in: 1...4, using: &generator) {
            let position = bytes.isEmpty ? 0 : Int.random(in: 0..<bytes.count, using: &generator)
            switch Int.random(in: 0..<6, using: &generator) {
            case 0 where !bytes.isEmpty: bytes[position] ^= 1 << UInt8.random(in: 0..<8, using: &generator)
            case 1 where !bytes.isEmpty: bytes[position] = UInt8.random(in: .min ... .max, using: &generator)
            case 2: bytes.insert(contentsOf: randomBytes(Int.random(in: 1...64, using: &generator), seed: generator.next()), at: position)
            case 3 where !bytes.isEmpty: bytes.removeSubrange(position..<min(bytes.count, position + Int.random(in: 1...64, using: &generator)))
            case 4: bytes.removeLast(bytes.count - position)
            default: bytes.insert(contentsOf: [0, 3] + WireFormat.endOfMessage, at: position)
            }
        }
    }

    @Test func receiverSurvivesMutatedStreams() {
        var generator = SeededGenerator(seed: 20_240_601)
        var outcomes = [String: Int]()
        for _ in 0..<Self.iterations {
            var bytes = seedStream(&generator)
            mutate(&bytes, &generator)
            var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: Self.limit))
            var outcome = "incomplete"
            for value in values(from: bytes) {
                do {
                    if case .complete(let message) = try receiver.receive(value) {
                        outcome = "complete-\(message.format)"
                        #expect(message.payload.count <= Self.limit)
                    }
                } catch {
                    outcome = "\(error)".prefix(while: { $0 != " " }).description
                    break
                }
                #expect(receiver.progress.bytesSoFar <= Self.limit)
            }
            if outcome == "incomplete" { #expect(receiver.finishWithoutEOM() != nil || receiver.isComplete) }
            outcomes[outcome, default: 0] += 1
        }
        // The fuzzer reached complete messages and several distinct refusals.
        #expect(outcomes["complete-compat", default: 0] > 0)
        #expect(outcomes.count >= 3, "\(outcomes)")
    }

    @Test func theRetiredVersion1RecognizerSurvivesArbitraryWrites() {
        var generator = SeededGenerator(seed: 99)
        let seeds = [[0x89, 0x42, 0x4C, 0x54, 0x48, 1] + [UInt8](repeating: 7, count: 8),
                     [0, 0, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1, 0, 0]]
        var recognised = 0
        for iteration in 0..<Self.iterations {
            var bytes = seeds[iteration % 2]
            if iteration % 7 != 0 { mutate(&bytes, &generator) }
            if RetiredVersion1.isHello(bytes) || RetiredVersion1.startsStream(bytes) { recognised += 1 }
            _ = try? BluetoothUUID(String(decoding: bytes, as: UTF8.self))
        }
        #expect(recognised > 0 && recognised < Self.iterations)
    }
}
