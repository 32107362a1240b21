@testable import Transfer
import TestSupport

/// All values a sender produces, in order.
func allValues(_ sender: MessageSender) -> [[UInt8]] {
    var sender = sender
    var values: [[UInt8]] = []
    while let value = sender.nextValue() { values.append(value) }
    return values
}

/// Feeds `values` to a receiver and returns the completed message; fails if a value other
/// than the last completes it, or the last does not.
func reassemble(_ values: [[UInt8]], limits: TransferLimits = .default) throws(ReceiveError) -> ReceivedMessage? {
    var receiver = MessageReceiver(limits: limits)
    for (index, value) in values.enumerated() {
        let event = try receiver.receive(value)
        if case .complete(let message) = event {
            return index == values.count - 1 ? message : nil
        }
    }
    return nil
}

/// Apple's Objective-C sample: 20-byte slices, then EOM (no protection against a data "EOM").
func appleStyleValues(_ payload: [UInt8], chunkSize: Int = 20) -> [[UInt8]] {
    stride(from: 0, to: payload.count, by: chunkSize).map {
        Array(payload[$0..<min($0 + chunkSize, payload.count)])
    } + [WireFormat.endOfMessage]
}

/// Payloads every format test runs over, named for failure messages.
let samplePayloads: [(name: String, bytes: [UInt8])] = [
    ("empty", []),
    ("one byte", [0x41]),
    ("EOM", WireFormat.endOfMessage),
    ("EO", [0x45, 0x4F]),
    ("EOMEOM", WireFormat.endOfMessage + WireFormat.endOfMessage),
    ("multi-byte UTF-8 text", Array(String(repeating: "héllo wörld — 日本語テキスト 🎉👩‍👩‍👧 ", count: 40).utf8)),
    ("binary", randomBytes(3000, seed: 7)),
    ("binary starting like a retired version-1 stream", [0, 0, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1]
        + randomBytes(200, seed: 8)),
    ("ends in EOM after 20", randomBytes(20, seed: 9) + WireFormat.endOfMessage),
    ("ends in EOM after 182", randomBytes(182, seed: 10) + WireFormat.endOfMessage),
    ("all zeros", [UInt8](repeating: 0, count: 1025)),
]

/// `values` reordered as several ATT bearers may deliver them: a random permutation in which no
/// value moves more than `displacement` places from where it was sent (`EOM` included, so it may
/// overtake the last values).
func shuffledWithin<Generator: RandomNumberGenerator>(
    _ values: [[UInt8]], displacement: Int, using generator: inout Generator
) -> [[UInt8]] {
    // Sorting by index + a jitter in 0...displacement moves no element further than that.
    let keys = values.indices.map { ($0 + Int.random(in: 0...displacement, using: &generator), $0) }
    return keys.sorted { $0 < $1 }.map { values[$0.1] }
}

/// The largest distance any value moved between `original` and `shuffled` (values distinct).
func maximumDisplacement(_ original: [[UInt8]], _ shuffled: [[UInt8]]) -> Int {
    var position: [[UInt8]: Int] = [:]
    for (index, value) in original.enumerated() { position[value] = index }
    return shuffled.enumerated().map { abs($0.offset - (position[$0.element] ?? $0.offset)) }.max() ?? 0
}

// The payloads of these tests are held in memory (reading a file is the shells' work).
extension ReceivedMessage {
    var payload: [UInt8] { body.inMemory ?? [] }
}

extension OutgoingMessage {
    var payload: [UInt8] { body.inMemory ?? [] }
}
