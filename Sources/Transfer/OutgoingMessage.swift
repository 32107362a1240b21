/// A message ready to send: its payload (in memory, or in an open file read as it goes), the
/// payload's SHA-256, and what travels with it.
package struct OutgoingMessage: Sendable, Hashable {
    package let body: MessagePayload
    /// SHA-256 of the payload, 32 bytes.
    package let digest: [UInt8]
    /// The file's name and modification time, sent in the secure mode when the central takes
    /// them; nil for a message that is not a named file (or `send --no-name`).
    package let file: SentFileAttributes?
    /// The one authorized peer this message is for, by its name or fingerprint in the
    /// authorized-peers file (a sender daemon's `outbox/NAME/`); nil: any peer the sender serves.
    package let addressee: String?

    package init(payload: [UInt8], file: SentFileAttributes? = nil, addressee: String? = nil) {
        body = MessagePayload(payload)
        self.digest = sha256(payload)
        self.file = file
        self.addressee = addressee
    }

    /// A payload already measured: `digest` is its SHA-256 (a file's, from a first pass).
    package init(body: MessagePayload, digest: [UInt8], file: SentFileAttributes? = nil, addressee: String? = nil) {
        self.body = body
        self.digest = digest
        self.file = file
        self.addressee = addressee
    }

    /// The payload's length in bytes.
    package var byteCount: Int { body.count }

    /// The same message: the same bytes (by length and SHA-256, wherever they are held), name
    /// and addressee. Two claims of one file are one message.
    package static func == (lhs: OutgoingMessage, rhs: OutgoingMessage) -> Bool {
        lhs.digest == rhs.digest && lhs.byteCount == rhs.byteCount && lhs.file == rhs.file && lhs.addressee == rhs.addressee
    }

    package func hash(into hasher: inout Hasher) {
        hasher.combine(digest)
        hasher.combine(byteCount)
        hasher.combine(file)
        hasher.combine(addressee)
    }
}
