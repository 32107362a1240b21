import SystemCalls
import Transfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Reading a payload where it is held: the shells' side of `MessagePayload` (a file is read with `pread` on the
/// thread that asks, so callers on the cooperative pool hand large reads to `BlockingCalls`).
extension MessagePayload {
    /// Bytes `range` (within `0..<count`), read from the file when the payload is in one.
    package func bytes(in range: Range<Int>) throws(PayloadReadError) -> [UInt8] {
        precondition(range.lowerBound >= 0 && range.upperBound <= count, "range beyond the payload")
        switch storage {
        case .memory(let bytes): return Array(bytes[range])
        case .file(let file): return try file.read(at: range.lowerBound, count: range.count)
        }
    }

    /// The whole payload in memory, for small messages (Apple's flow, a terminal, tests); a file is read in one piece.
    package func loadedBytes() throws(PayloadReadError) -> [UInt8] {
        if let inMemory { return inMemory }
        return try bytes(in: 0..<count)
    }

    /// The first bytes, at most `limit`, for guessing what the payload is (UTF-8 text or not).
    package func prefix(_ limit: Int) throws(PayloadReadError) -> [UInt8] { try bytes(in: 0..<min(limit, count)) }

    /// SHA-256 of the payload, read in pieces of `pieceLength` bytes.
    package func sha256(pieceLength: Int = 1 << 20) throws(PayloadReadError) -> [UInt8] {
        if let inMemory { return Transfer.sha256(inMemory) }
        var digest = RunningDigest()
        var offset = 0
        while offset < count {
            let piece = try bytes(in: offset..<min(count, offset + pieceLength))
            digest.update(piece)
            offset += piece.count
        }
        return digest.digest
    }
}

extension OutgoingMessage {
    /// The message of the regular file at `path`, read once now for its SHA-256 and then again, piece by piece, as it
    /// is sent: any size, constant memory. (Reading twice costs a second or two per gigabyte from disk against hours
    /// over the air, and the digest must lead: the receiver keys resume and duplicates by it before the first byte.)
    package static func ofFile(at path: String, file: SentFileAttributes? = nil,
                              addressee: String? = nil) throws(PayloadReadError) -> (OutgoingMessage, stat) {
        let (opened, status) = try PayloadFile.openForReading(path)
        let body = MessagePayload(file: opened, count: Int(status.st_size))
        let digest = try body.sha256()
        return (OutgoingMessage(body: body, digest: digest, file: file, addressee: addressee), status)
    }

    /// The whole payload in memory (a file read whole; unreadable: nothing): for small messages and tests.
    package var payload: [UInt8] { (try? body.loadedBytes()) ?? [] }
}

extension ReceivedMessage {
    /// The whole payload in memory (read here from its file when it is in one; an unreadable
    /// file gives nothing): for messages shown or written whole, and tests.
    package var payload: [UInt8] {
        get { (try? body.loadedBytes()) ?? [] }
        set { body = MessagePayload(newValue) }
    }
}
