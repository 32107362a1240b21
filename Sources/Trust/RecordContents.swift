#if canImport(Transfer)
import Transfer
#endif
/// What a version-2 record says (docs/wire-v2.md, "Record kinds"); integers are big-endian.
package enum RecordMessage: Sendable, Equatable {
    /// P → C: a message begins.
    case header(MessageHeader)
    /// P → C: `bytes` of message `message` from `offset` on.
    case data(message: UInt32, offset: UInt64, bytes: [UInt8])
    /// P → C: message `message` is complete after `totalBytes` bytes.
    case end(message: UInt32, totalBytes: UInt64)
    /// C → P: the receiver's verdict on a message.
    case ack(SecureAck)
    /// C → P: the receiver holds the first `offset` bytes of message `message` already.
    case resume(message: UInt32, offset: UInt64)
    /// Both: no more messages (`00`), or the receiver cannot take more (`01`).
    case close(reason: UInt8)
    /// C → P (`window`): the receiver holds the first `held` payload bytes of message `message`.
    case progress(message: UInt32, held: UInt64)

    /// The most payload bytes the sender puts in one DATA record.
    package static let dataBytesPerRecord = 4096

    package var record: Record {
        switch self {
        case .header(let header):
            return Record(kind: .header, content: header.encoded)
        case .data(let message, let offset, let bytes):
            return Record(kind: .data, content: bigEndian(message) + bigEndian(offset) + bytes)
        case .end(let message, let totalBytes):
            return Record(kind: .end, content: bigEndian(message) + bigEndian(totalBytes))
        case .ack(let ack):
            return Record(kind: .ack, content: ack.encoded)
        case .resume(let message, let offset):
            return Record(kind: .resume, content: bigEndian(message) + bigEndian(offset))
        case .close(let reason):
            return Record(kind: .close, content: [reason])
        case .progress(let message, let held):
            return Record(kind: .progress, content: bigEndian(message) + bigEndian(held))
        }
    }

    package init(parsing record: Record) throws(RecordContentError) {
        var reader = ContentReader(record.content, kind: record.kind)
        switch record.kind {
        case .header:
            self = .header(try MessageHeader(reading: &reader))
        case .data:
            let message: UInt32 = try reader.integer()
            let offset: UInt64 = try reader.integer()
            let bytes = reader.rest()
            guard !bytes.isEmpty else { throw .malformed(kind: .data, reason: "no bytes") }
            guard offset <= UInt64.max - UInt64(bytes.count) else {
                throw .malformed(kind: .data, reason: "offset past 2^64")
            }
            self = .data(message: message, offset: offset, bytes: bytes)
        case .end:
            self = .end(message: try reader.integer(), totalBytes: try reader.integer())
        case .ack:
            self = .ack(try SecureAck(reading: &reader))
        case .resume:
            self = .resume(message: try reader.integer(), offset: try reader.integer())
        case .close:
            self = .close(reason: try reader.integer())
        case .progress:
            self = .progress(message: try reader.integer(), held: try reader.integer())
        case .pairing:
            throw .malformed(kind: .pairing, reason: "a pairing record in a transfer")
        }
        try reader.finish()
    }
}

extension MessageHeader {
    var encoded: [UInt8] {
        let meta = metadata?.encoded ?? []
        return bigEndian(message) + bigEndian(payloadLength) + digest + bigEndian(UInt16(meta.count)) + meta
    }

    init(reading reader: inout ContentReader) throws(RecordContentError) {
        let message: UInt32 = try reader.integer()
        let payloadLength: UInt64 = try reader.integer()
        let digest = try reader.bytes(32)
        let metadataLength: UInt16 = try reader.integer()
        var metadata: FileMetadata?
        if metadataLength > 0 {
            var inner = ContentReader(try reader.bytes(Int(metadataLength)), kind: .header)
            metadata = try FileMetadata(reading: &inner)
            try inner.finish()
        }
        self.init(message: message, payloadLength: payloadLength, digest: digest, metadata: metadata)
    }
}

extension FileMetadata {
    var encoded: [UInt8] {
        let name = Array(name.utf8)
        return [UInt8(name.count)] + name + bigEndian(UInt64(bitPattern: modificationSeconds))
            + bigEndian(modificationNanoseconds)
    }

    init(reading reader: inout ContentReader) throws(RecordContentError) {
        let length: UInt8 = try reader.integer()
        let bytes = try reader.bytes(Int(length))
        guard Self.isSafeName(bytes), let name = String(validating: bytes, as: UTF8.self) else {
            throw .malformed(kind: .header, reason: "file name is not a clean UTF-8 relative path")
        }
        let seconds: UInt64 = try reader.integer()
        let nanoseconds: UInt32 = try reader.integer()
        guard let metadata = FileMetadata(name: name, modificationSeconds: Int64(bitPattern: seconds),
                                          modificationNanoseconds: nanoseconds) else {
            throw .malformed(kind: .header, reason: "nanoseconds over 999999999")
        }
        self = metadata
    }
}

/// The receiver's ACK: the full SHA-256, sealed under the central → peripheral key: only the receiver can make one.
package struct SecureAck: Sendable, Equatable {
    package enum Outcome: UInt8, Sendable {
        case stored = 0x00
        case alreadyStored = 0x01
        case refusedOverLimit = 0x02
        case refusedDigestMismatch = 0x03
    }

    package var message: UInt32
    package var digest: [UInt8]
    package var outcome: Outcome
}

extension SecureAck {
    var encoded: [UInt8] { bigEndian(message) + digest + [outcome.rawValue] }

    init(reading reader: inout ContentReader) throws(RecordContentError) {
        message = try reader.integer()
        digest = try reader.bytes(32)
        let raw: UInt8 = try reader.integer()
        guard let outcome = Outcome(rawValue: raw) else { throw .malformed(kind: .ack, reason: "unknown outcome \(raw)") }
        self.outcome = outcome
    }
}

package enum RecordContentError: Error, Sendable, Equatable, CustomStringConvertible {
    case truncated(kind: RecordKind)
    case trailingBytes(kind: RecordKind, count: Int)
    case malformed(kind: RecordKind, reason: String)

    package var description: String {
        switch self {
        case .truncated(let kind): return "\(kind) record cut short"
        case .trailingBytes(let kind, let count): return "\(kind) record with \(count) bytes too many"
        case .malformed(let kind, let reason): return "malformed \(kind) record: \(reason)"
        }
    }
}

func bigEndian<Integer: FixedWidthInteger>(_ value: Integer) -> [UInt8] {
    withUnsafeBytes(of: value.bigEndian, Array.init)
}

/// Reads fields front to back; every read past the end is `truncated`.
struct ContentReader {
    private let bytes: [UInt8]
    private var offset = 0
    let kind: RecordKind

    init(_ bytes: [UInt8], kind: RecordKind) {
        self.bytes = bytes
        self.kind = kind
    }

    mutating func bytes(_ count: Int) throws(RecordContentError) -> [UInt8] {
        guard count <= bytes.count - offset else { throw .truncated(kind: kind) }
        defer { offset += count }
        return Array(bytes[offset..<offset + count])
    }

    mutating func integer<Integer: FixedWidthInteger>() throws(RecordContentError) -> Integer {
        try bytes(Integer.bitWidth / 8).reduce(Integer.zero) { $0 << 8 | Integer($1) }
    }

    mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return Array(bytes[offset...])
    }

    func finish() throws(RecordContentError) {
        guard offset == bytes.count else { throw .trailingBytes(kind: kind, count: bytes.count - offset) }
    }
}
