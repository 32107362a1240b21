import Machines
import Transfer

/// Where the central puts each complete, verified message. A sink sees only whole messages: the engine hands one over
/// after `EOM` (and, when framed, after the digest matched), never a part.
package protocol MessageSink: Sendable {
    /// Stores one message. Returns where it went (a file path) for the `received` event, or nil when there is no such
    /// place (standard output). Throws ``MessageRefused`` when this message cannot be stored but others may be (a
    /// directory sink: the message is refused, its sender keeps it, the run goes on), or a ``ClassifiedFailure``
    /// (usually `.ioError`) when nothing more can be (one output file, standard output closed): the run then ends.
    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String?

    /// Why a message of `byteCount` bytes (announced, or received so far) could not be kept; nil when it can. Asked
    /// before and while a message arrives, so what cannot be stored is refused while its sender has it (no ACK).
    func admissionRefusal(byteCount: Int) -> StorageRefusal?

    /// ``admissionRefusal(byteCount:)`` for a framed message that announced `announced` bytes: its resume spool may
    /// keep a copy beside it while it arrives, which the reserve counts when both are on one file system.
    func admissionRefusal(announced: Int) -> StorageRefusal?

    /// Why the rest of a message (`announced` bytes in all, if known; `received` so far) cannot be written without
    /// eating into the reserve: asked before every write, as others fill the disk too. Cheap (one `statvfs`).
    func writeRefusal(announced: Int?, received: Int) -> StorageRefusal?

    /// Where a framed message's bytes are written as they come, so that storing it is a link
    /// and its size costs no memory (a directory sink: a partial file in the directory); nil
    /// holds messages in memory, bounded by `--max-size`.
    var partialPayloadStore: (any PartialPayloadStore)? { get }
}

extension MessageSink {
    package var partialPayloadStore: (any PartialPayloadStore)? { nil }

    /// Sinks without a bound (standard output, memory) take anything up to `--max-size`.
    package func admissionRefusal(byteCount: Int) -> StorageRefusal? { nil }

    package func admissionRefusal(announced: Int) -> StorageRefusal? { admissionRefusal(byteCount: announced) }

    package func writeRefusal(announced: Int?, received: Int) -> StorageRefusal? { nil }
}

/// One message a sink could not store (a full disk, a file system error, a name it cannot hold even generated): the
/// central refuses it with this reason and goes on; the sender, without an ACK, keeps it.
package struct MessageRefused: Error, Sendable, CustomStringConvertible {
    package var reason: String

    package init(reason: String) { self.reason = reason }

    package var description: String { reason }
}

package struct SinkFailure: ClassifiedFailure, CustomStringConvertible {
    package var kind: FailureKind
    package var userMessage: String

    package init(_ kind: FailureKind = .ioError, _ userMessage: String) {
        self.kind = kind
        self.userMessage = userMessage
    }

    package var description: String { userMessage }
}
