/// A message received completely: `EOM` seen and, when secure, length and SHA-256 verified against its HEADER.
package struct ReceivedMessage: Sendable, Hashable {
    /// In memory, or (a large message to a directory) in a partial file beside where it is stored.
    package var body: MessagePayload
    package var format: TransferFormat
    /// A secure message's verified HEADER; nil for compat.
    package var header: MessageHeader?
    /// The public key line of the sender the handshake authenticated; stored with the file.
    package var authenticatedSender: String?
    /// With `meta`: the sender's name and time, unsanitized (kept and shown only via the output directory, `SafeText`).
    package var file: SentFileAttributes?

    package init(body: MessagePayload, format: TransferFormat, header: MessageHeader? = nil) {
        self.body = body
        self.format = format
        self.header = header
    }

    /// The payload's length (a secure message's HEADER's, even before its bytes are put in `body`).
    package var byteCount: Int { header.map { Int(clamping: $0.payloadLength) } ?? body.count }

    /// SHA-256 of the payload when secure (verified), nil for compat.
    package var digest: [UInt8]? { header?.digest }

    /// The payload as text, decoded whole (a character split across values survives); nil: not UTF-8.
    package var text: String? {
        // A payload in a file is a large one, taken for a file's bytes, not for text.
        guard case .memory(let payload) = body.storage else { return nil }
        let decoded = String(decoding: payload, as: UTF8.self)
        // Decoding replaces invalid sequences with U+FFFD, which changes the bytes.
        return decoded.utf8.elementsEqual(payload) ? decoded : nil
    }
}
