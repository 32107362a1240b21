import Crypto

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A message's bytes: held in memory (a text, standard input, a small message received), or
/// in an open file read piece by piece as the message goes out or written piece by piece as
/// it comes in. A file of any size thereby moves in constant memory: only the piece under way
/// is held.
public struct MessagePayload: Sendable, Hashable {
    public enum Storage: Sendable, Hashable {
        case memory([UInt8])
        /// The first `count` bytes of this file.
        case file(PayloadFile)
    }

    public let storage: Storage
    /// The payload's length in bytes.
    public let count: Int

    public init(_ bytes: [UInt8]) {
        storage = .memory(bytes)
        count = bytes.count
    }

    /// The first `count` bytes of `file`.
    public init(file: PayloadFile, count: Int) {
        storage = .file(file)
        self.count = max(0, count)
    }

    public var isEmpty: Bool { count == 0 }

    /// The open file the payload is read from; nil when it is in memory.
    public var file: PayloadFile? {
        if case .file(let file) = storage { file } else { nil }
    }

    /// Bytes `range` (within `0..<count`), read from the file when the payload is in one.
    public func bytes(in range: Range<Int>) throws(PayloadReadError) -> [UInt8] {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "range beyond the payload")
        switch storage {
        case .memory(let bytes):
            return Array(bytes[range])
        case .file(let file):
            return try file.read(at: range.lowerBound, count: range.count)
        }
    }

    /// The whole payload in memory: for small messages (Apple's flow, a terminal, tests). A
    /// payload in a file is read here in one piece.
    public func loadedBytes() throws(PayloadReadError) -> [UInt8] {
        switch storage {
        case .memory(let bytes): return bytes
        case .file: return try bytes(in: 0..<count)
        }
    }

    /// The first bytes, at most `limit`, for guessing what the payload is (UTF-8 text or not).
    public func prefix(_ limit: Int) throws(PayloadReadError) -> [UInt8] {
        try bytes(in: 0..<min(limit, count))
    }

    /// SHA-256 of the payload, read in pieces of `pieceLength` bytes.
    public func sha256(pieceLength: Int = 1 << 20) throws(PayloadReadError) -> [UInt8] {
        if case .memory(let bytes) = storage { return Array(SHA256.hash(data: bytes)) }
        var hasher = SHA256()
        var offset = 0
        while offset < count {
            let piece = try bytes(in: offset..<min(count, offset + pieceLength))
            hasher.update(data: piece)
            offset += piece.count
        }
        return Array(hasher.finalize())
    }
}

/// Reads a payload front to back through a window: a payload in a file costs one read per
/// `windowLength` bytes, not one per value (20 to 512 bytes over GATT), which matters when the
/// file sits on a slow or remote file system. A payload in memory is sliced directly.
public struct PayloadWindowReader: Sendable {
    public let payload: MessagePayload
    public let windowLength: Int
    private var windowStart = 0
    private var window: [UInt8] = []

    public init(_ payload: MessagePayload, windowLength: Int = 64 * 1024) {
        self.payload = payload
        self.windowLength = max(1, windowLength)
    }

    /// Bytes `range` (within `0..<payload.count`).
    public mutating func bytes(in range: Range<Int>) throws(PayloadReadError) -> [UInt8] {
        guard payload.file != nil, range.count <= windowLength else { return try payload.bytes(in: range) }
        if range.lowerBound < windowStart || range.upperBound > windowStart + window.count {
            windowStart = range.lowerBound
            window = try payload.bytes(in: range.lowerBound..<min(payload.count, range.lowerBound + windowLength))
        }
        return Array(window[(range.lowerBound - windowStart)..<(range.upperBound - windowStart)])
    }
}

/// Why a payload's file could not be read (or written, while a message comes in): the call,
/// the file and the error, in one line.
public struct PayloadReadError: Error, Sendable, Hashable, CustomStringConvertible {
    public var description: String

    public init(_ description: String) { self.description = description }

    static func failed(_ call: String, _ path: String, errno code: Int32) -> PayloadReadError {
        // strerror's words, lower-cased as a clause after the colon: "permission denied".
        let reason = String(cString: strerror(code))
        return PayloadReadError("\(call) '\(path)': \(reason.prefix(1).lowercased() + reason.dropFirst())")
    }
}

/// An open file a payload is read from or written to, closed when the last payload that uses
/// it is gone. `removesPathWhenReleased`: a partial file of a message coming in, which is
/// removed by name then, so that a transfer that failed leaves nothing behind (one stored was
/// linked to its own name before).
///
/// Sendable: every stored property is an immutable value; `pread`/`pwrite` take their offset
/// and share no file position, so the descriptor is safe to use from any thread.
public final class PayloadFile: Sendable, Hashable, CustomStringConvertible {
    public let descriptor: Int32
    /// The path the file was opened at (for messages and, for a partial file, for linking it).
    public let path: String
    public let removesPathWhenReleased: Bool

    /// Takes ownership of `descriptor`.
    public init(descriptor: Int32, path: String, removesPathWhenReleased: Bool = false) {
        self.descriptor = descriptor
        self.path = path
        self.removesPathWhenReleased = removesPathWhenReleased
    }

    deinit {
        if removesPathWhenReleased { _ = unlink(path) }
        _ = close(descriptor)
    }

    /// Opens `path` to be read, refusing what is not a regular file (a FIFO cannot be read
    /// twice, and a message's digest needs a first pass). Returns the file and its length.
    public static func openForReading(_ path: String) throws(PayloadReadError) -> (PayloadFile, stat) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else { throw .failed("cannot open", path, errno: errno) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let code = errno
            _ = close(descriptor)
            throw .failed("cannot examine", path, errno: code)
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            _ = close(descriptor)
            throw PayloadReadError("'\(path)' is not a regular file")
        }
        return (PayloadFile(descriptor: descriptor, path: path), status)
    }

    /// `count` bytes at `offset`; fewer on disk (the file shrank since it was measured) is an
    /// error, since the message's length and digest were announced.
    public func read(at offset: Int, count: Int) throws(PayloadReadError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset + done))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw .failed("cannot read", path, errno: errno)
            }
            guard got > 0 else {
                throw PayloadReadError("'\(path)' became shorter while it was sent (\(offset + done) bytes left of \(offset + count))")
            }
            done += got
        }
        return bytes
    }

    /// Writes `bytes` at `offset` (a message coming in).
    public func write(_ bytes: some Collection<UInt8>, at offset: Int) throws(PayloadReadError) {
        let contiguous = Array(bytes)
        var done = 0
        while done < contiguous.count {
            let wrote = contiguous.withUnsafeBytes { buffer in
                pwrite(descriptor, buffer.baseAddress! + done, contiguous.count - done, off_t(offset + done))
            }
            if wrote < 0 {
                if errno == EINTR { continue }
                throw .failed("cannot write", path, errno: errno)
            }
            done += wrote
        }
    }

    public static func == (lhs: PayloadFile, rhs: PayloadFile) -> Bool { lhs === rhs }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    public var description: String { path }
}

/// Where a receiver puts a message's bytes as they come, when they should not be held in
/// memory: a partial file beside the messages stored (the output directory), so that storing
/// it is a link, not a copy, and a file of any size needs no more memory than a small one.
public protocol PartialPayloadStore: Sendable {
    /// An empty partial file for a message of `length` bytes; nil keeps it in memory (a small
    /// message, or no room for a file). The file is removed when its payload is released
    /// unless it was linked to a name first.
    func makePartialFile(length: UInt64) throws(PayloadReadError) -> PayloadFile?
}

/// The bytes of a message coming in, in memory or in a partial file, and their SHA-256 so far.
public struct IncomingPayload: Sendable {
    private var memory: [UInt8] = []
    private let file: PayloadFile?
    private var hasher = RunningDigest()
    public private(set) var count = 0

    /// `file`: an empty partial file to write to; nil holds the bytes in memory, with room
    /// reserved for `expectedLength` (bounded: the announcement is the peer's word).
    public init(file: PayloadFile?, expectedLength: Int) {
        self.file = file
        if file == nil { memory.reserveCapacity(min(expectedLength, 1 << 20)) }
    }

    public var isInFile: Bool { file != nil }

    public mutating func append(_ bytes: some Collection<UInt8>) throws(PayloadReadError) {
        if let file {
            try file.write(bytes, at: count)
        } else {
            memory.append(contentsOf: bytes)
        }
        hasher.state.update(data: Array(bytes))
        count += bytes.count
    }

    /// SHA-256 of everything appended.
    public var digest: [UInt8] { Array(hasher.state.finalize()) }

    /// The payload received.
    public var payload: MessagePayload {
        if let file { return MessagePayload(file: file, count: count) }
        return MessagePayload(memory)
    }
}

/// SHA-256 state carried by a value that moves between tasks. `@unchecked Sendable`: `SHA256`
/// has value semantics (its BoringSSL context is copied on write, guarded by
/// `isKnownUniquelyReferenced`), so a copy in another task shares no mutable state with the
/// original; Crypto only does not declare the conformance.
struct RunningDigest: @unchecked Sendable {
    var state = SHA256()
}
