/// A message ready to send: payload (in memory or an open file), its SHA-256, what travels with it.
package struct OutgoingMessage: Sendable, Hashable {
    package let body: MessagePayload
    /// SHA-256 of the payload, 32 bytes.
    package let digest: [UInt8]
    /// Name and modification time, sent when the central takes them; nil: not a named file.
    package let file: SentFileAttributes?
    /// The one authorized peer it is for, by name or fingerprint (`outbox/NAME/`); nil: any peer.
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

    /// The same bytes (by length and SHA-256, wherever held), name and addressee: two claims of a file are one message.
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
