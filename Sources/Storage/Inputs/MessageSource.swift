import Machines
import Transfer

/// Where a `Peripheral` gets the messages it serves, one at a time, in order.
///
/// The peripheral asks for `current()`, advertises, serves that message to every subscriber
/// (each from byte 0) until one delivery counts, then calls `markDelivered` and asks again.
/// `send` serves one fixed message N times; a daemon serves outbox files in order.
package protocol MessageSource: Sendable {
    /// The message to serve now. May wait until one is available (a daemon's empty outbox);
    /// nil means there is nothing more to send, and the peripheral's `run` returns.
    ///
    /// When the serving task is cancelled while this waits (the adapter left `poweredOn`,
    /// bluetoothd restarted, the run was cancelled), return promptly; nil is then read as
    /// "interrupted", not "exhausted", and `current()` is asked again once serving resumes.
    func current() async -> OutgoingMessage?

    /// `message` (the one `current()` returned) was delivered to `peer`; the next call to `current()` moves on.
    func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async

    /// After `markDelivered`: the next message if ready now, without waiting (nil: none). A secure session carrying
    /// several (`multi`) sends it in the same subscription; else the session closes and `current()` is asked.
    func nextAvailableNow() async -> OutgoingMessage?

    /// While the message `current()` (or `nextAvailableNow()`) returned is still awaiting its ACK: the message that
    /// will follow it and the `sentAhead` messages already sent after it, if one is ready now (nil: none, or the
    /// source cannot tell). A session with `pipeline` starts sending it at once; once the messages before it are
    /// delivered, `nextAvailableNow()` must return these same messages in order (the session ends otherwise). Each
    /// stays claimed until then, and is not counted. Asked with the window full, it prepares the message (read,
    /// hashed) so that it goes out without that wait once the window opens.
    func upcomingNow(skipping sentAhead: Int) async -> OutgoingMessage?

    /// The offered message is addressed to another peer and `peer` (authorized) was refused it: a message ready now
    /// that `peer` may have (to it or to anyone), which then becomes the current one; nil keeps the current one.
    func message(for peer: AuthenticatedPeer) async -> OutgoingMessage?
}

extension MessageSource {
    /// A source that cannot tell without waiting: one message per session.
    package func nextAvailableNow() async -> OutgoingMessage? { nil }

    /// A source that cannot look past its current message: no pipelining.
    package func upcomingNow(skipping sentAhead: Int) async -> OutgoingMessage? { nil }

    /// A source whose messages have no addressee never needs another.
    package func message(for peer: AuthenticatedPeer) async -> OutgoingMessage? { nil }
}
