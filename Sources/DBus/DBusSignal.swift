/// A signal received from the bus.
public struct DBusSignal: Sendable {
    /// The sender's unique name (":1.42").
    public var sender: String
    public var path: ObjectPath
    public var interface: String
    public var member: String
    public var arguments: [DBusValue]

    public init(sender: String, path: ObjectPath, interface: String, member: String, arguments: [DBusValue]) {
        self.sender = sender
        self.path = path
        self.interface = interface
        self.member = member
        self.arguments = arguments
    }
}

/// Signals matching one rule, in arrival order. Single consumer. The rule is removed from the
/// bus when the consumer stops iterating (iterator and stream released, or its task
/// cancelled), when `finish()` is called, or when the connection closes (the sequence ends).
public struct DBusSignalStream: AsyncSequence, Sendable {
    public typealias Element = DBusSignal
    public typealias Failure = Never

    let stream: AsyncStream<DBusSignal>
    let subscription: SignalSubscription

    public struct AsyncIterator: AsyncIteratorProtocol {
        var iterator: AsyncStream<DBusSignal>.Iterator
        // Keeps the subscription alive as long as someone iterates.
        let subscription: SignalSubscription

        public mutating func next() async -> DBusSignal? {
            await iterator.next()
        }

        public mutating func next(isolation actor: isolated (any Actor)?) async -> DBusSignal? {
            await iterator.next(isolation: actor)
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(iterator: stream.makeAsyncIterator(), subscription: subscription)
    }

    /// Ends the sequence and removes the match rule.
    public func finish() {
        subscription.finish()
    }
}
