import BlueZ
import DaemonSupport
import Machines
import Trust

/// Runs a `PairingExchange` over the hosts' channel: carries its messages, bounds each wait, asks the person once.
package enum PairingConversation {
    /// How long the other host may take for each protocol message.
    package static let defaultMessageTimeout: Duration = .seconds(15)

    /// Thrown by the initiator instead of a `RoleFailure` when nothing at all came back on the channel, so nothing was
    /// exchanged and a fresh channel is worth a try: on a one-packet-per-event link a Linux 6.1 host that was setting
    /// up Enhanced ATT bearers at the same moment was seen to give the channel a CID it had just freed, and the hello
    /// went nowhere.
    package struct Unanswered: Error {
        package let failure: RoleFailure
    }

    /// - Parameters:
    ///   - ask: shows the candidate and returns the person's answer (true: the codes match).
    ///     The caller bounds it; the peer's answer is awaited `answerTimeout` plus
    ///     `messageTimeout` at most, as long as the other person may take.
    ///   - messageTimeout: how long the other host may take for each protocol message.
    /// - Returns: the exchange's result; throws a `RoleFailure` when the other host breaks the
    ///   protocol, leaves or falls silent, or `Unanswered` when the initiator heard nothing at all.
    package static func run(
        _ meeting: PairingRendezvous.Meeting, identity: HostIdentity, name: String?, answerTimeout: Duration,
        messageTimeout: Duration = defaultMessageTimeout, ask: @escaping @Sendable (PairingExchange.Candidate) async -> Bool
    ) async throws -> PairingExchange.Result {
        let socket = meeting.socket
        var exchange = PairingExchange(role: meeting.role, identity: identity, name: name)
        var heard = meeting.firstMessage != nil
        do {
            try await send(try exchange.start(), on: socket)
            if let first = meeting.firstMessage { try await send(try exchange.receive(first), on: socket) }
            while case .exchanging = exchange.phase {
                let message = try await next(from: socket, within: messageTimeout, peer: meeting.peerDescription)
                heard = true
                try await send(try exchange.receive(message), on: socket)
            }
            guard case .comparing(let candidate) = exchange.phase else {
                throw RoleFailure(.software, "pairing ended before the code was known")
            }
            let accepted = await ask(candidate)
            try await send(try exchange.answer(accepted), on: socket)
            while case .comparing = exchange.phase {
                let message = try await next(from: socket, within: answerTimeout + messageTimeout,
                                             peer: meeting.peerDescription)
                _ = try exchange.receive(message)
            }
            try await sayFarewell(on: socket, within: messageTimeout, peer: meeting.peerDescription)
        } catch let error as PairingError {
            throw interrupted(RoleFailure(.dataError, "pairing with \(meeting.peerDescription) failed: \(error); nothing added"),
                              exchange)
        } catch is CancellationError {
            throw CancellationError()
        } catch where !heard {
            // Only the initiator gets here: a responder heard the hello before the conversation began.
            throw Unanswered(failure: (error as? RoleFailure) ?? RoleFailure(
                .unavailable, "\(meeting.peerDescription) left the pairing (\(error)); nothing added"))
        } catch let failure as RoleFailure {
            throw interrupted(failure, exchange)
        } catch {
            // The channel failed under us (a send to a peer that left, the link dropped).
            throw interrupted(RoleFailure(.unavailable, "\(meeting.peerDescription) left the pairing (\(error)); nothing added"),
                              exchange)
        }
        guard case .finished(let result) = exchange.phase else {
            throw RoleFailure(.software, "pairing ended without a result")
        }
        return result
    }

    /// What the person is told of a pairing that ended after the key exchange and before both answers were in. Someone
    /// in the middle ends it there: he sees the handshake hashes, and breaks off rather than let people type codes that
    /// would not match. A bad link ends it the same way, and nothing tells the two apart, so the line says both.
    static let interferenceNote = "it ended after the key exchange, as it would if someone in range were "
        + "interfering (or the link failed); run 'bletransfer pair' again on both hosts, close together"

    /// `failure`, worded as possible interference when `exchange` got past the key exchange
    /// without finishing (a failure after both answers is the farewell's, worded already).
    static func interrupted(_ failure: RoleFailure, _ exchange: PairingExchange) -> RoleFailure {
        guard exchange.isPastKeyExchange else { return failure }
        if case .finished = exchange.phase { return failure }
        return RoleFailure(failure.kind, failure.userMessage + "; " + interferenceNote)
    }

    /// The last message of a pairing, sent by each side once it holds the other's answer.
    /// Not a `PairingExchange` message: it is read only after the exchange has finished.
    static let farewell: [UInt8] = Array("BLTP-DONE".utf8)

    /// Closes the pairing on both sides, not on one. On an LE credit-based channel a message that has left our socket
    /// may still be waiting for the other side's credits when we close, and closing drops it: the other side would
    /// then miss our answer and add nothing while we add its key. So each side says farewell once it holds both
    /// answers and closes only when it hears the other's farewell, which proves the other side holds our answer. The
    /// channel closing instead means the other side heard ours and closed first (its farewell lost the same way), or
    /// left after its answer: either way ours had reached it. Silence is the one case where the other side may lack
    /// our answer: nothing is added here, and the person is told to pair again on both hosts.
    private static func sayFarewell(on socket: NotificationSocket, within limit: Duration, peer: String) async throws {
        try await socket.send(farewell)
        let heard = try await receive(on: socket, within: limit, late: RoleFailure(
            .timedOut, "\(peer) did not confirm the end of the pairing within "
                + "\(limit.components.seconds) s; nothing added here; run 'bletransfer pair' again on both hosts"))
        if let heard, heard != farewell {
            throw RoleFailure(.dataError, "\(peer) sent more after the pairing ended; nothing added here; "
                + "run 'bletransfer pair' again on both hosts")
        }
    }

    private static func send(_ messages: [[UInt8]], on socket: NotificationSocket) async throws {
        for message in messages { try await socket.send(message) }
    }

    private static func next(from socket: NotificationSocket, within limit: Duration, peer: String) async throws -> [UInt8] {
        let late = RoleFailure(.timedOut, "\(peer) did not answer within \(limit.components.seconds) s; nothing added")
        guard let message = try await receive(on: socket, within: limit, late: late) else {
            throw RoleFailure(.unavailable, "\(peer) left the pairing (the channel closed); nothing added")
        }
        return message
    }

    /// The next message (nil: the channel closed); `late` once `limit` passed without one.
    private static func receive(on socket: NotificationSocket, within limit: Duration,
                                late: RoleFailure) async throws -> [UInt8]? {
        do {
            return try await withTimeLimit(limit, onTimeout: { L2CAPChannelError.timedOut }) {
                try await socket.receive()
            }
        } catch L2CAPChannelError.timedOut { throw late }
    }
}
