/// A signal received from the bus (the connection builds it: its memberwise initialiser is
/// internal).
public struct DBusSignal: Sendable {
    /// The sender's unique name (":1.42").
    public var sender: String
    public var path: ObjectPath
    public var interface: String
    public var member: String
    public var arguments: [DBusValue]
}

/// Signals matching one rule, in arrival order.
///
/// Iterate it once. The match rule is removed from the bus as soon as the consumer stops:
/// when its iterator is released (a `for await` loop left by `break`, `return` or a thrown
/// error), when the iterating task is cancelled, or when `finish()` is called. The sequence
/// ends (returns nil) when the connection closes or is lost.
public struct DBusSignalStream: AsyncSequence, Sendable {
    public typealias Element = DBusSignal
    public typealias Failure = Never

    let stream: AsyncStream<DBusSignal>
    let subscription: SignalSubscription

    public struct AsyncIterator: AsyncIteratorProtocol {
        var iterator: AsyncStream<DBusSignal>.Iterator
        let consumer: Consumer

        public mutating func next() async -> DBusSignal? {
            await iterator.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> DBusSignal? {
            await iterator.next(isolation: actor)
        }
    }

    /// Lives as long as the iterator (and its copies): its end is the consumer's end.
    final class Consumer: Sendable {
        let subscription: SignalSubscription
        init(subscription: SignalSubscription) { self.subscription = subscription }
        deinit { subscription.finish() }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(iterator: stream.makeAsyncIterator(), consumer: Consumer(subscription: subscription))
    }

    /// Ends the sequence and removes the match rule.
    public func finish() {
        subscription.finish()
    }
}
