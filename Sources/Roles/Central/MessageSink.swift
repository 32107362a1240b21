import Transfer

/// Where the central puts each complete, verified message. A sink sees only whole messages:
/// the engine hands one over after `EOM` (and, when framed, after the digest matched), never
/// a part.
public protocol MessageSink: Sendable {
    /// Stores one message. Returns where it went (a file path) for the `received` event, or
    /// nil when there is no such place (standard output). Throws a ``ClassifiedFailure``
    /// (usually `.ioError`) when the message could not be stored; the run then ends.
    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String?

    /// Why a message of `byteCount` bytes (announced, or received so far) could not be kept;
    /// nil when it can. Asked before and while a message arrives, so that what cannot be
    /// stored is refused while its sender still has it (no ACK is written).
    func admissionRefusal(byteCount: Int) -> StorageRefusal?
}

extension MessageSink {
    /// Sinks without a bound (standard output, memory) take anything up to `--max-size`.
    public func admissionRefusal(byteCount: Int) -> StorageRefusal? { nil }
}

/// The failure a sink reports when writing fails.
public struct SinkFailure: ClassifiedFailure, CustomStringConvertible {
    public var kind: FailureKind
    public var userMessage: String

    public init(_ kind: FailureKind = .ioError, _ userMessage: String) {
        self.kind = kind
        self.userMessage = userMessage
    }

    public var description: String { userMessage }
}
