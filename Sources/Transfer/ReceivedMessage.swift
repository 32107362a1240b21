/// A message received completely: `EOM` seen and, in the secure format, length and SHA-256
/// verified against its HEADER.
package struct ReceivedMessage: Sendable, Hashable {
    /// The payload: in memory, or (a large message coming to a directory) in a partial file
    /// beside where it is stored.
    package var body: MessagePayload
    package var format: TransferFormat
    /// The verified HEADER of a secure message (its number, length, SHA-256 and, with `meta`,
    /// the file's name and time); nil for compat.
    package var header: MessageHeader?
    /// Secure mode: the public key line of the sender the handshake authenticated (its key
    /// was in the authorized peers); nil otherwise. Stored with the file it becomes.
    package var authenticatedSender: String?
    /// Secure mode with `meta`: the name and modification time the sender gave its file, as
    /// sent (unsanitized: store and show it only through the output directory and `SafeText`);
    /// nil for a message without them.
    package var file: SentFileAttributes?

    package init(payload: [UInt8], format: TransferFormat, header: MessageHeader? = nil) {
        self.init(body: MessagePayload(payload), format: format, header: header)
    }

    package init(body: MessagePayload, format: TransferFormat, header: MessageHeader? = nil) {
        self.body = body
        self.format = format
        self.header = header
    }

    /// The payload's length in bytes (a secure message's, its HEADER's, even before the bytes
    /// kept as they came are put into `body`).
    package var byteCount: Int { header.map { Int(clamping: $0.payloadLength) } ?? body.count }

    /// SHA-256 of the payload when secure (verified), nil for compat.
    package var digest: [UInt8]? { header?.digest }

    /// The payload as text, decoded from the complete byte sequence (so a character split across
    /// two notifications survives); nil when it is not valid UTF-8.
    package var text: String? {
        // A payload in a file is a large one, taken for a file's bytes, not for text.
        guard case .memory(let payload) = body.storage else { return nil }
        let decoded = String(decoding: payload, as: UTF8.self)
        // Decoding replaces invalid sequences with U+FFFD, which changes the bytes.
        return decoded.utf8.elementsEqual(payload) ? decoded : nil
    }
}
