/// A signal received from the bus (the connection builds it: its memberwise initialiser is
/// internal).
package struct DBusSignal: Sendable {
    /// The sender's unique name (":1.42").
    package var sender: String
    package var path: ObjectPath
    package var interface: String
    package var member: String
    package var arguments: [DBusValue]
}

/// Signals matching one rule, in arrival order.
///
/// Iterate it once. The match rule is removed from the bus as soon as the consumer stops:
/// when its iterator is released (a `for await` loop left by `break`, `return` or a thrown
/// error), when the iterating task is cancelled, or when `finish()` is called. The sequence
/// ends (returns nil) when the connection closes or is lost.
package struct DBusSignalStream: AsyncSequence, Sendable {
    package typealias Element = DBusSignal
    package typealias Failure = Never

    let stream: AsyncStream<DBusSignal>
    let subscription: SignalSubscription

    package struct AsyncIterator: AsyncIteratorProtocol {
        var iterator: AsyncStream<DBusSignal>.Iterator
        let consumer: Consumer

        package mutating func next() async -> DBusSignal? {
            await iterator.next()
        }

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
    package func finish() {
        subscription.finish()
    }
}
