/// Why a secure session ended without delivering its message: one line, printed after the peer's address.
package enum SecureSessionError: Error, Sendable, Equatable, CustomStringConvertible {
    case unauthorizedPeer(PeerKey)
    /// The peer answered without `secure` (a downgrade, or a retired plain peer).
    case notSecure
    /// The Noise handshake failed (the `NoiseError`'s description).
    case handshakeFailed(String)
    /// A record or frame was refused: authentication failure, bad frame, unknown kind...
    case recordFailed(String)
    /// A well-formed record at the wrong point: wrong kind, wrong message number, wrong offset...
    case protocolViolation(String)
    /// Receiver: the HEADER announces more than the receiver accepts.
    case tooLarge(announced: UInt64, limit: Int)
    /// Receiver: END reached, but the length or the SHA-256 differ from the HEADER's.
    case digestMismatch
    /// The sequence-numbered values: a duplicate, one too far ahead, one too short...
    case streamFailed(String)
    /// This side could not read the message's file (it shrank or failed while sent).
    case payloadUnreadable(String)

    package var description: String {
        switch self {
        case .unauthorizedPeer(let key): return "peer key \(key.fingerprint) is not authorized"
        case .notSecure: return "peer does not speak the secure mode this side requires"
        case .handshakeFailed(let reason): return "secure handshake failed: \(reason)"
        case .recordFailed(let reason): return "secure record refused: \(reason)"
        case .protocolViolation(let reason): return "protocol violation: \(reason)"
        case .tooLarge(let announced, let limit):
            return "message of \(announced) bytes announced, over the limit of \(limit) bytes"
        case .digestMismatch: return "message length or SHA-256 differ from its header"
        case .streamFailed(let reason): return "value stream broken: \(reason)"
        case .payloadUnreadable(let reason): return "the message could not be read: \(reason)"
        }
    }

    init(_ error: NoiseError) {
        if case .unauthorizedPeer(let key) = error {
            self = .unauthorizedPeer(key)
        } else {
            self = .handshakeFailed(error.description)
        }
    }

    init(_ error: RecordError) { self = .recordFailed(error.description) }
    init(_ error: FrameError) { self = .recordFailed(error.description) }
    init(_ error: RecordContentError) { self = .recordFailed(error.description) }
}
