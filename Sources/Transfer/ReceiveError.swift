/// What a broken or hostile sender can do to a compat message, each a one-line description. A
/// ``MessageReceiver`` then throws the same for every further value: nothing partial passes as whole.
package enum ReceiveError: Error, Sendable, Hashable, CustomStringConvertible {
    /// A secure session's HEADER announced a payload longer than the limit.
    case announcedLengthExceedsLimit(announced: UInt64, limit: Int)
    /// The sender unsubscribed or disconnected before `EOM` (see ``MessageReceiver/finishWithoutEOM()``).
    case missingEndOfMessage(received: Int)
    /// A stream grew past ``TransferLimits/maximumMessageSize``.
    case compatMessageTooLarge(limit: Int)
    /// A value arrived after the message was complete (or a second `EOM`).
    case valueAfterEndOfMessage
    /// After a version-2 HELLO, `EOM` and then values no compat sender sends: the secure stream's first value is lost.
    case missingStartOfMessage(valuesReceived: Int)

    package var description: String {
        switch self {
        case .announcedLengthExceedsLimit(let announced, let limit):
            "sender announced a message of \(announced) bytes, over the limit of \(limit) bytes"
        case .missingEndOfMessage(let received):
            "sender went away before the end of the message (\(received) bytes received, no end marker)"
        case .compatMessageTooLarge(let limit):
            "message exceeds the limit of \(limit) bytes"
        case .valueAfterEndOfMessage:
            "sender sent data after the end of the message"
        case .missingStartOfMessage(let count):
            "the end marker arrived but the message's first value never did (\(count) values received)"
        }
    }
}
