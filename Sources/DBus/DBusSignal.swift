/// A signal received from the bus (built by the connection: the memberwise init is internal).
package struct DBusSignal: Sendable {
    package var sender: String  // unique name (":1.42")
    package var path: ObjectPath
    package var interface: String
    package var member: String
    package var arguments: [DBusValue]
}

/// Signals matching one rule, in arrival order; iterate it once. The rule is removed from the bus as soon as the
/// consumer stops: its iterator released (a `for await` left by `break`, `return` or a throw), its task cancelled, or
/// `finish()`. The sequence ends when the connection closes or is lost.
package struct DBusSignalStream: AsyncSequence, Sendable {
    package typealias Element = DBusSignal
    package typealias Failure = Never

    let stream: AsyncStream<DBusSignal>
    let subscription: SignalSubscription

    package struct AsyncIterator: AsyncIteratorProtocol {
        var iterator: AsyncStream<DBusSignal>.Iterator
        let consumer: Consumer

        package mutating func next() async -> DBusSignal? { await iterator.next() }

        package mutating func next(isolation actor: isolated (any Actor)?) async -> DBusSignal? {
            await iterator.next(isolation: actor)
        }
    }

    /// Lives as long as the iterator (and its copies): its end is the consumer's end.
    final class Consumer: Sendable {
        let subscription: SignalSubscription
        init(subscription: SignalSubscription) { self.subscription = subscription }
        deinit { subscription.finish() }
    }

    package func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(iterator: stream.makeAsyncIterator(), consumer: Consumer(subscription: subscription))
    }

    /// Ends the sequence and removes the match rule.
    package func finish() { subscription.finish() }
}
