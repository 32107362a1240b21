/// One interface we serve on an exported object.
public struct DBusInterface: Sendable {
    public var name: String
    public var methods: [DBusMethod]
    public var properties: [DBusProperty]
    public var signals: [DBusSignalDescription]

    public init(
        name: String, methods: [DBusMethod] = [], properties: [DBusProperty] = [],
        signals: [DBusSignalDescription] = []
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }
}

/// A method we serve.
public struct DBusMethod: Sendable {
    public var name: String
    /// A call whose arguments do not have exactly this signature gets an InvalidArgs error reply
    /// and the handler is not run.
    public var inSignature: Signature
    /// The reply's arguments must have this signature (otherwise the caller gets a Failed error).
    public var outSignature: Signature
    /// Runs off the event loop and may await other D-Bus calls: the loop keeps serving while a
    /// handler or an outgoing call waits. Return the reply's arguments; throw `DBusError` to
    /// send that error reply (any other error becomes org.freedesktop.DBus.Error.Failed).
    public var handler: @Sendable (DBusMethodCall) async throws -> [DBusValue]

    public init(
        name: String, in inSignature: Signature = "", out outSignature: Signature = "",
        handler: @escaping @Sendable (DBusMethodCall) async throws -> [DBusValue]
    ) {
        self.name = name
        self.inSignature = inSignature
        self.outSignature = outSignature
        self.handler = handler
    }
}

/// An inbound method call, as a handler sees it (the connection builds it: its memberwise
/// initialiser is internal).
public struct DBusMethodCall: Sendable {
    public var sender: String
    public var path: ObjectPath
    public var interface: String
    public var member: String
    public var arguments: [DBusValue]
}

/// A property we serve through org.freedesktop.DBus.Properties.
public struct DBusProperty: Sendable {
    public enum Access: Sendable {
        case read, write, readWrite

        var isReadable: Bool { self != .write }
        var isWritable: Bool { self != .read }
        var introspectionName: String {
            switch self {
            case .read: "read"
            case .write: "write"
            case .readWrite: "readwrite"
            }
        }
    }

    public var name: String
    /// A single complete type.
    public var signature: Signature
    public var access: Access
    /// Returns the value WITHOUT the variant wrapper.
    public var get: @Sendable () async throws -> DBusValue
    /// Receives the value WITHOUT the variant wrapper, already checked against `signature`.
    public var set: (@Sendable (DBusValue) async throws -> Void)?

    public init(
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
public struct DBusSignalDescription: Sendable {
    public var name: String
    public var signature: Signature
    public init(name: String, signature: Signature = "") {
        self.name = name
        self.signature = signature
    }
}
