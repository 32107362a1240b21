import DaemonSupport
import SystemCalls
import Transfer

/// Where a receiver puts a message's bytes as they come when not in memory: a partial file beside the stored messages
/// (the output directory), so storing is a link, not a copy, and any size needs no more memory than a small one.
package protocol PartialPayloadStore: Sendable {
    /// An empty partial file for a message of `length` bytes; nil keeps it in memory (a small message, or no room for
    /// a file). The file is removed when its payload is released unless it was linked to a name first.
    func makePartialFile(length: UInt64) throws(PayloadReadError) -> PayloadFile?
}

/// The bytes of a secure message coming in, kept by the central's shell as its session hands
/// them out: in memory, or in a partial file, written at the offsets the session gives.
package struct IncomingPayload: Sendable {
    private var memory: [UInt8] = []
    private let file: PayloadFile?
    package private(set) var count = 0

    /// `file`: an empty partial file to write to; nil holds the bytes in memory, with room
    /// reserved for `expectedLength` (bounded: the announcement is the peer's word).
    package init(file: PayloadFile?, expectedLength: Int) {
        self.file = file
        if file == nil { memory.reserveCapacity(min(expectedLength, 1 << 20)) }
    }

    /// Where `length` incoming bytes go: a partial file from `store` (made off the shared pool), else memory.
    package static func make(length: UInt64, in store: (any PartialPayloadStore)?) async throws(PayloadReadError) -> IncomingPayload {
        let file = try await BlockingCalls.run { () throws(PayloadReadError) in try store?.makePartialFile(length: length) }
        return IncomingPayload(file: file, expectedLength: Int(clamping: length))
    }

    /// Writes `bytes` at `offset` (the session's order: each offset continues the bytes kept,
    /// or rewrites ones a checkpoint put there); to a file off the shared thread pool.
    package mutating func write(_ bytes: [UInt8], at offset: Int) async throws(PayloadReadError) {
        if let file {
            try await BlockingCalls.run { () throws(PayloadReadError) in try file.write(bytes, at: offset) }
        } else if offset == memory.count {
            memory.append(contentsOf: bytes)
        } else {
            let end = offset + bytes.count
            if end > memory.count { memory.append(contentsOf: repeatElement(0, count: end - memory.count)) }
            memory.replaceSubrange(offset..<end, with: bytes)
        }
        count = max(count, offset + bytes.count)
    }

    /// Copies `held` (a checkpoint: the first bytes) to offset 0, off the shared pool; returns their SHA-256 state.
    package mutating func copyCheckpoint(_ held: MessagePayload) async throws(PayloadReadError) -> RunningDigest {
        var digest = RunningDigest()
        var offset = 0
        while offset < held.count {
            let range = offset..<min(held.count, offset + (1 << 20))
            let piece = try await BlockingCalls.run { () throws(PayloadReadError) in try held.bytes(in: range) }
            try await write(piece, at: offset)
            digest.update(piece)
            offset += piece.count
        }
        return digest
    }

    package var payload: MessagePayload {
        if let file { return MessagePayload(file: file, count: count) }
        return MessagePayload(memory)
    }
}
