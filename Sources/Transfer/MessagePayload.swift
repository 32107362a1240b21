import Crypto
#if canImport(SystemCalls)
import SystemCalls
#endif

/// A message's bytes: in memory (a text, standard input, a small message received), or in an open file the shells
/// read and write piece by piece, so any size moves in constant memory. Transfer, Trust and Machines never touch the
/// file: they say which bytes they need or hand out (DaemonSupport's `PayloadReading`, the roles' shells).
package struct MessagePayload: Sendable, Hashable {
    package enum Storage: Sendable, Hashable {
        case memory([UInt8])
        /// The first `count` bytes of this file.
        case file(PayloadFile)
    }

    package let storage: Storage
    package let count: Int

    package init(_ bytes: [UInt8]) {
        storage = .memory(bytes)
        count = bytes.count
    }

    /// The first `count` bytes of `file`.
    package init(file: PayloadFile, count: Int) {
        storage = .file(file)
        self.count = max(0, count)
    }

    package var isEmpty: Bool { count == 0 }

    /// The open file the payload is read from; nil when it is in memory.
    package var file: PayloadFile? {
        if case .file(let file) = storage { file } else { nil }
    }

    package var inMemory: [UInt8]? {
        if case .memory(let bytes) = storage { bytes } else { nil }
    }
}

/// The bytes of a payload's file a sender holds, one window at a time (memory is sliced directly).
package struct PayloadWindow: Sendable {
    /// How much the caller reads at once: one read per window, not one per value.
    package static let length = 64 * 1024

    private var start = 0
    private var bytes: [UInt8] = []

    package init() {}

    /// Bytes `range` of `payload`, or nil while they must be read first.
    package func bytes(_ range: Range<Int>, of payload: MessagePayload) -> [UInt8]? {
        if let memory = payload.inMemory { return Array(memory[range]) }
        guard range.lowerBound >= start, range.upperBound <= start + bytes.count else { return nil }
        return Array(bytes[(range.lowerBound - start)..<(range.upperBound - start)])
    }

    /// What to read for `range` of `payload` (a window from its start), or nil when held.
    package func wanted(_ range: Range<Int>, in payload: MessagePayload) -> Range<Int>? {
        guard bytes(range, of: payload) == nil else { return nil }
        return range.lowerBound..<min(payload.count, range.lowerBound + max(Self.length, range.count))
    }

    package mutating func keep(_ read: [UInt8], at offset: Int) {
        start = offset
        bytes = read
    }
}

/// A message's SHA-256 so far, as a value that moves between tasks. `@unchecked Sendable`: `SHA256`
/// has value semantics (its BoringSSL context is copied on write, guarded by
/// `isKnownUniquelyReferenced`), so a copy shares no mutable state; Crypto only does not declare it.
package struct RunningDigest: @unchecked Sendable, Equatable {
    private var state = SHA256()

    package init() {}

    package mutating func update(_ bytes: some Collection<UInt8>) {
        state.update(data: Array(bytes))
    }

    /// SHA-256 of everything given so far.
    package var digest: [UInt8] { Array(state.finalize()) }

    package static func == (lhs: RunningDigest, rhs: RunningDigest) -> Bool { lhs.digest == rhs.digest }
}
