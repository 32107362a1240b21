/// Frames of a version-2 stream (docs/wire-v2.md, section 1): `type (1) | length (2) | body`:
/// handshake messages, then `sealed` records. Type `03` (retired plain records) is refused.
package struct Frame: Sendable, Equatable {
    package enum FrameType: UInt8, Sendable {
        case handshake = 0x01
        case sealed = 0x02
    }

    package static let headerLength = 3
    /// Longest body a receiver accepts: a sealed record of the longest content (kind, content, tag).
    package static let maximumBodyLength = 1 + Record.maximumContentLength + 16

    package var type: FrameType
    package var body: [UInt8]

    static func header(type: FrameType, length: Int) -> [UInt8] {
        [type.rawValue, UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
    }

    package var encoded: [UInt8] { Self.header(type: type, length: body.count) + body }
}

package enum FrameError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownType(UInt8)
    case tooLong(Int)
    /// An earlier frame was refused; the stream is not read further.
    case closedAfterFailure

    package var description: String {
        switch self {
        case .unknownType(let type): return "unknown frame type \(type)"
        case .tooLong(let length): return "frame of \(length) bytes, over the limit of \(Frame.maximumBodyLength)"
        case .closedAfterFailure: return "stream closed after a refused frame"
        }
    }
}

/// Cuts a byte stream into frames. An unknown type or over-long length is refused on the 3-byte
/// header, before buffering the body: a peer cannot make it hold more than one frame.
package struct FrameReader: Sendable {
    private var buffer: [UInt8] = []
    private var failed = false

    package init() {}

    /// Bytes held for an incomplete frame.
    package var bufferedByteCount: Int { buffer.count }

    package mutating func append(_ bytes: some Collection<UInt8>) throws(FrameError) -> [Frame] {
        guard !failed else { throw .closedAfterFailure }
        buffer += bytes
        var frames: [Frame] = []
        var start = 0
        while buffer.count - start >= Frame.headerLength {
            guard let type = Frame.FrameType(rawValue: buffer[start]) else { throw fail(.unknownType(buffer[start])) }
            let length = Int(buffer[start + 1]) << 8 | Int(buffer[start + 2])
            guard length <= Frame.maximumBodyLength else { throw fail(.tooLong(length)) }
            let end = start + Frame.headerLength + length
            guard buffer.count >= end else { break }
            frames.append(Frame(type: type, body: Array(buffer[(start + Frame.headerLength)..<end])))
            start = end
        }
        buffer.removeFirst(start)
        return frames
    }

    /// The stream is refused for good: nothing held, nothing read further.
    private mutating func fail(_ error: FrameError) -> FrameError {
        failed = true
        buffer = []
        return error
    }
}

/// What a record says (docs/wire-v2.md, "Record kinds"): the first plaintext byte, inside the encryption.
package enum RecordKind: UInt8, Sendable, CaseIterable {
    case header = 0x01
    case data = 0x02
    case end = 0x03
    case ack = 0x04
    case resume = 0x05
    case close = 0x06
    case progress = 0x07
    /// `bletransfer pair` only (PairingExchange): never part of a transfer.
    case pairing = 0x10
}

package struct Record: Sendable, Equatable {
    package var kind: RecordKind
    package var content: [UInt8]

    package static let maximumContentLength = 16384
}

package enum RecordError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Tampered, replayed, reordered, cut short or sealed under another key: the direction is dead.
    case authenticationFailed
    /// A record opened, but its kind byte is unknown.
    case unknownKind(UInt8)
    case tooLong(Int)
    case notSealed
    /// An earlier record failed; nothing more is opened in this direction.
    case closedAfterFailure
    case nonceExhausted

    package var description: String {
        switch self {
        case .authenticationFailed: return "record failed authentication (tampered, replayed, reordered or wrong key)"
        case .unknownKind(let kind): return "record of unknown kind \(kind)"
        case .tooLong(let length): return "record content of \(length) bytes, over the limit of \(Record.maximumContentLength)"
        case .notSealed: return "frame that is not a sealed record"
        case .closedAfterFailure: return "session closed after a failed record"
        case .nonceExhausted: return "record counter exhausted"
        }
    }
}

/// Seals records in one direction: ChaChaPoly with the direction's key, the counter as nonce, the
/// frame header as associated data; Noise `Rekey()` every `rekeyInterval` records, as the opener does.
package struct RecordSealer: Sendable {
    package static let defaultRekeyInterval: UInt64 = 65536

    private var cipher: NoiseCipherState
    private let rekeyInterval: UInt64
    package private(set) var recordsSealed: UInt64 = 0

    init(cipher: NoiseCipherState, rekeyInterval: UInt64) {
        self.cipher = cipher
        self.rekeyInterval = max(rekeyInterval, 1)
    }

    /// The frame (`02 | length | ciphertext+tag`) carrying `record`.
    package mutating func seal(_ record: Record) throws(RecordError) -> [UInt8] {
        guard record.content.count <= Record.maximumContentLength else { throw .tooLong(record.content.count) }
        let plaintext = [record.kind.rawValue] + record.content
        let header = Frame.header(type: .sealed, length: plaintext.count + NoiseCipherState.tagLength)
        let ciphertext: [UInt8]
        do {
            ciphertext = try cipher.encrypt(associatedData: header, plaintext: plaintext)
        } catch {
            throw .nonceExhausted
        }
        recordsSealed += 1
        if recordsSealed % rekeyInterval == 0 { cipher.rekey() }
        return header + ciphertext
    }
}

/// Opens sealed records in one direction, strictly in order. The first failure closes it for good:
/// a session with one forged record is not trusted with the next.
package struct RecordOpener: Sendable {
    private var cipher: NoiseCipherState
    private let rekeyInterval: UInt64
    private var failed = false
    package private(set) var recordsOpened: UInt64 = 0

    init(cipher: NoiseCipherState, rekeyInterval: UInt64) {
        self.cipher = cipher
        self.rekeyInterval = max(rekeyInterval, 1)
    }

    package mutating func open(_ frame: Frame) throws(RecordError) -> Record {
        guard !failed else { throw .closedAfterFailure }
        do throws(RecordError) {
            guard frame.type == .sealed else { throw .notSealed }
            guard frame.body.count <= Record.maximumContentLength + 1 + NoiseCipherState.tagLength else {
                throw .tooLong(frame.body.count)
            }
            let header = Frame.header(type: .sealed, length: frame.body.count)
            let plaintext: [UInt8]
            do {
                plaintext = try cipher.decrypt(associatedData: header, ciphertext: frame.body)
            } catch {
                throw error == .nonceExhausted ? .nonceExhausted : .authenticationFailed
            }
            recordsOpened += 1
            if recordsOpened % rekeyInterval == 0 { cipher.rekey() }
            guard let first = plaintext.first, let kind = RecordKind(rawValue: first) else {
                throw .unknownKind(plaintext.first ?? 0)
            }
            return Record(kind: kind, content: Array(plaintext.dropFirst()))
        } catch {
            failed = true
            throw error
        }
    }
}
