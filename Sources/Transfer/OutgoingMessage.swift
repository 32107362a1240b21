/// A payload prepared for sending: its SHA-256 is computed once here, so every new
/// subscription (each starts the message again from byte 0) builds a ``MessageSender``
/// without hashing or copying the payload again.
public struct OutgoingMessage: Sendable, Hashable {
    public let payload: [UInt8]
    /// SHA-256 of `payload`, 32 bytes.
    public let digest: [UInt8]
    /// The file's name and modification time, sent in the secure mode when the central takes
    /// them; nil for a message that is not a named file (or `send --no-name`).
    public let file: SentFileAttributes?
    /// The one authorized peer this message is for, by its name or fingerprint in the
    /// authorized-peers file (a sender daemon's `outbox/NAME/`); nil: any peer the sender serves.
    public let addressee: String?

    public init(payload: [UInt8], file: SentFileAttributes? = nil, addressee: String? = nil) {
        self.payload = payload
        self.digest = FramedHeader.sha256(payload)
        self.file = file
        self.addressee = addressee
    }

    /// The framed header announcing this message to the central that wrote `hello`.
    public func header(for hello: Hello) -> FramedHeader {
        FramedHeader(session: hello.session, payloadLength: payload.count, digest: digest)
    }
}
