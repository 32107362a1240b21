/// Reassembles one compat message from values in arrival order (nothing to reorder by) until `EOM`. Memory is bounded
/// by ``TransferLimits/maximumMessageSize``, not by the peer: a stream is refused as soon as it would pass the limit.
package struct MessageReceiver: Sendable {
    package enum Event: Sendable, Equatable {
        /// After each value that did not end the message.
        case progress(TransferProgress)
        case complete(ReceivedMessage)
    }

    package let limits: TransferLimits
    private var payload: [UInt8] = []
    private var failure: ReceiveError?
    /// Values received so far, `EOM` included.
    package private(set) var valuesReceived = 0
    package private(set) var isComplete = false

    package init(limits: TransferLimits = .default) {
        self.limits = limits
    }

    package var progress: TransferProgress { TransferProgress(bytesSoFar: payload.count, totalBytes: nil) }

    package mutating func receive(_ value: [UInt8]) throws(ReceiveError) -> Event {
        valuesReceived += 1
        if let failure { throw failure }
        guard !isComplete else { throw fail(.valueAfterEndOfMessage) }
        if value == WireFormat.endOfMessage {
            isComplete = true
            defer { payload = [] }
            return .complete(ReceivedMessage(body: MessagePayload(payload), format: .compat))
        }
        let needed = payload.count + value.count
        guard needed <= limits.maximumMessageSize else { throw fail(.compatMessageTooLarge(limit: limits.maximumMessageSize)) }
        if needed > payload.capacity {
            payload.reserveCapacity(min(limits.maximumMessageSize, max(needed, 2 * payload.capacity, 256)))
        }
        payload.append(contentsOf: value)
        return .progress(progress)
    }

    /// Why the message is incomplete when the sender left or went quiet (nil: complete); later values are refused.
    package mutating func finishWithoutEOM() -> ReceiveError? {
        if isComplete { return nil }
        if let failure { return failure }
        return fail(.missingEndOfMessage(received: payload.count))
    }

    private mutating func fail(_ error: ReceiveError) -> ReceiveError {
        failure = error
        payload = []
        return error
    }
}
