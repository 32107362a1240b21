/// Everything a broken or hostile sender can do to a message, each with a one-line description
/// a user can act on. Once a ``MessageReceiver`` threw one, it throws the same error for every
/// further value: nothing partial is ever presented as complete.
public enum ReceiveError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A framed header announced a payload longer than ``TransferLimits/maximumMessageSize``.
    case announcedLengthExceedsLimit(announced: UInt64, limit: Int)
    /// A framed sender kept sending data after the announced length.
    case dataAfterAnnouncedLength(announced: Int)
    /// `EOM` arrived before the framed header was complete.
    case truncatedHeader(receivedBytes: Int)
    /// `EOM` arrived before the announced number of payload bytes.
    case truncatedPayload(received: Int, announced: Int)
    /// The sender unsubscribed or disconnected before `EOM` (see ``MessageReceiver/finishWithoutEOM()``).
    case missingEndOfMessage(received: Int, announced: Int?)
    /// The received payload's SHA-256 differs from the one in the framed header.
    case digestMismatch(announced: [UInt8], computed: [UInt8])
    /// A compat stream grew past ``TransferLimits/maximumMessageSize`` (or a framed one did
    /// before its header was complete, or a stream not yet known to be either).
    case compatMessageTooLarge(limit: Int)
    /// A framed header with a version this build does not understand.
    case unsupportedVersion(UInt8)
    /// A framed header that answers another central's HELLO.
    case sessionMismatch(expected: SessionID, received: SessionID)
    /// A value arrived after the message was complete (or a second `EOM`).
    case valueAfterEndOfMessage
    /// A framed value arrived twice.
    case duplicateValue(sequence: UInt16)
    /// A framed value arrived further ahead of the one still missing than the reorder window
    /// (``WireFormat/reorderWindow``) allows.
    case reorderWindowExceeded(sequence: UInt16, expected: UInt16)
    /// A framed value too short to hold a sequence number and a byte.
    case malformedFramedValue(length: Int)
    /// `EOM` arrived, but the framed message's first value never did; also how a peer that
    /// ignores HELLO and sends an empty message ends (see ``MessageReceiver``).
    case missingStartOfMessage(valuesReceived: Int)

    public var description: String {
        switch self {
        case .announcedLengthExceedsLimit(let announced, let limit):
            "sender announced a message of \(announced) bytes, over the limit of \(limit) bytes"
        case .dataAfterAnnouncedLength(let announced):
            "sender sent more than the \(announced) bytes its header announced"
        case .truncatedHeader(let received):
            "message ended after \(received) of the \(FramedHeader.encodedLength) header bytes"
        case .truncatedPayload(let received, let announced):
            "message ended after \(received) of the \(announced) bytes announced"
        case .missingEndOfMessage(let received, let announced?):
            "sender went away before the end of the message (\(received) of \(announced) bytes received)"
        case .missingEndOfMessage(let received, nil):
            "sender went away before the end of the message (\(received) bytes received, no end marker)"
        case .digestMismatch:
            "message is corrupt: its SHA-256 does not match the one the sender announced"
        case .compatMessageTooLarge(let limit):
            "message exceeds the limit of \(limit) bytes"
        case .unsupportedVersion(let version):
            "sender uses framed format version \(version); this build understands version \(WireFormat.framedVersion)"
        case .sessionMismatch(let expected, let received):
            "sender answered another central's request (session \(received), ours \(expected))"
        case .valueAfterEndOfMessage:
            "sender sent data after the end of the message"
        case .duplicateValue(let sequence):
            "sender sent value \(sequence) twice"
        case .reorderWindowExceeded(let sequence, let expected):
            "value \(sequence) arrived more than \(WireFormat.reorderWindow) values ahead of missing value \(expected)"
        case .malformedFramedValue(let length):
            "sender sent a \(length)-byte value, too short for a framed value"
        case .missingStartOfMessage(let count):
            "the end marker arrived but the message's first value never did (\(count) values received)"
        }
    }
}
