import Synchronization

package struct DBusInterface: Sendable {
    package var name: String
    package var methods: [DBusMethod]
    package var properties: [DBusProperty]
    package var signals: [DBusSignalDescription]

    package init(
        name: String, methods: [DBusMethod] = [], properties: [DBusProperty] = [],
        signals: [DBusSignalDescription] = []
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }
}

package struct DBusMethod: Sendable {
    package enum Body: Sendable {
        /// Runs off the event loop, in a task per call, and may await other D-Bus calls: the loop keeps serving
        /// meanwhile. Return the reply's arguments; throw `DBusError` to send that error reply (any other error
        /// becomes org.freedesktop.DBus.Error.Failed).
        case handler(@Sendable (DBusMethodCall) async throws -> [DBusValue])
        /// Runs on the event-loop thread as the call is read, so calls arrive in the bus's order, with no task per call.
        /// It must return at once (hand the call on, e.g. to a stream) and answer through the `DBusPendingReply`, now
        /// or later, from any thread; a reply dropped unanswered sends an error.
        case immediate(@Sendable (DBusMethodCall, DBusPendingReply) -> Void)
    }

    package var name: String
    /// A call without exactly this signature gets InvalidArgs, the handler not run.
    package var inSignature: Signature
    /// The reply's arguments must have this signature (otherwise the caller gets Failed).
    package var outSignature: Signature
    package var body: Body
}

// In an extension, so that the memberwise `init(name:inSignature:outSignature:body:)` stays.
extension DBusMethod {
    package init(
        name: String, in inSignature: Signature = "", out outSignature: Signature = "",
        handler: @escaping @Sendable (DBusMethodCall) async throws -> [DBusValue]
    ) {
        self.init(name: name, inSignature: inSignature, outSignature: outSignature, body: .handler(handler))
    }

    /// A method whose calls are taken on the event-loop thread, in order (`Body.immediate`).
    package init(
        name: String, in inSignature: Signature = "", out outSignature: Signature = "",
        immediate: @escaping @Sendable (DBusMethodCall, DBusPendingReply) -> Void
    ) {
        self.init(name: name, inSignature: inSignature, outSignature: outSignature, body: .immediate(immediate))
    }
}

/// The one reply to a call taken by an immediate method: the first answer is sent, later ones ignored. Dropped without
/// an answer, it answers org.freedesktop.DBus.Error.Failed, so the caller is never left waiting on us.
package final class DBusPendingReply: Sendable {
    private let send: Mutex<(@Sendable (Result<[DBusValue], DBusError>) -> Void)?>

    /// `send` builds and sends the reply; called at most once.
    init(send: @escaping @Sendable (Result<[DBusValue], DBusError>) -> Void) {
        self.send = Mutex(send)
    }

    package var isAnswered: Bool { send.withLock { $0 == nil } }

    /// Replies with these arguments (they must match the out signature, otherwise the caller gets Failed).
    package func succeed(_ values: [DBusValue] = []) { answer(.success(values)) }

    package func fail(_ error: DBusError) { answer(.failure(error)) }

    private func answer(_ result: Result<[DBusValue], DBusError>) {
        let send = self.send.withLock { send in
            defer { send = nil }
            return send
        }
        send?(result)
    }

    deinit {
        answer(.failure(DBusError.failed("the call was dropped without an answer")))
    }
}

/// An inbound method call, as a handler sees it (built by the connection: the memberwise init is internal).
package struct DBusMethodCall: Sendable {
    package var sender: String
    package var path: ObjectPath
    package var interface: String
    package var member: String
    package var arguments: [DBusValue]
}

/// A property we serve through org.freedesktop.DBus.Properties.
package struct DBusProperty: Sendable {
    package enum Access: String, Sendable {
        case read, write, readWrite = "readwrite"  // raw values: introspection's names

        var isReadable: Bool { self != .write }
        var isWritable: Bool { self != .read }
    }

    package var name: String
    package var signature: Signature  // a single complete type
    package var access: Access
    /// Returns the value WITHOUT the variant wrapper.
    package var get: @Sendable () async throws -> DBusValue
    /// Receives the value WITHOUT the variant wrapper, already checked against `signature`.
    package var set: (@Sendable (DBusValue) async throws -> Void)?

    package init(
        name: String, signature: Signature, access: Access = .read,
        get: @escaping @Sendable () async throws -> DBusValue,
        set: (@Sendable (DBusValue) async throws -> Void)? = nil
    ) {
        self.name = name
        self.signature = signature
        self.access = access
        self.get = get
        self.set = set
    }
}

/// A signal an interface may emit (used for introspection).
package struct DBusSignalDescription: Sendable {
    package var name: String
    package var signature: Signature
    package init(name: String, signature: Signature = "") {
        self.name = name
        self.signature = signature
    }
}
