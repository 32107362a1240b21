/// A private connection to a message bus (stub while the event loop lands).
public final class DBusConnection: Sendable {
    public enum Bus: Sendable { case system, session }

    public static func connect(_ bus: Bus) async throws -> DBusConnection {
        throw DBusError.failed("not implemented yet")
    }
    public static func connect(address: String) async throws -> DBusConnection {
        throw DBusError.failed("not implemented yet")
    }
    public var uniqueName: String { "" }
    public func close() {}
    public func waitUntilDisconnected() async {}
    public func call(
        destination: String, path: ObjectPath, interface: String, method: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) async throws -> [DBusValue] { throw DBusError.failed("not implemented yet") }
    public func signals(matching rule: MatchRule) async throws -> DBusSignalStream {
        throw DBusError.failed("not implemented yet")
    }
    public func emitSignal(path: ObjectPath, interface: String, member: String, arguments: [DBusValue]) throws {}
    public func requestName(_ name: String) async throws {}
    public func export(_ interfaces: [DBusInterface], at path: ObjectPath) throws {}
    public func unexport(_ path: ObjectPath) {}
    public func exportObjectManager(at root: ObjectPath) throws {}
    public func emitPropertiesChanged(
        path: ObjectPath, interface: String, changed: [String: DBusValue], invalidated: [String] = []
    ) throws {}
}

final class SignalSubscription: Sendable {
    func finish() {}
}
