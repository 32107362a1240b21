import DBus

/// What `Adapter`, `Device`, `RemoteGATTService` and `RemoteGATTCharacteristic` have in common:
/// each is a session and the path of one object in bluetoothd's tree, nothing more. Properties
/// are read from the session's cache each time, so a handle never goes stale, and two handles
/// are equal when they name the same path through the same session, however old either is.
///
/// Internal on purpose: the handles' public API stays their own; this only keeps identity,
/// the cache lookup and the listing of handles written once. Each handle's `init(session:path:)`
/// is the memberwise one.
protocol BlueZObjectHandle: Hashable, Sendable {
    /// The interface that makes an object this kind of handle ("org.bluez.Device1").
    static var interface: String { get }
    var session: BluetoothSession { get }
    var path: ObjectPath { get }
    init(session: BluetoothSession, path: ObjectPath)
}

extension BlueZObjectHandle {
    /// The object's properties on `Self.interface` as the session last heard them; nil once
    /// BlueZ removed the object (or before it announced it).
    var cachedProperties: [String: DBusValue]? {
        session.properties(of: path, interface: Self.interface)
    }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.path == rhs.path && lhs.session === rhs.session
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(ObjectIdentifier(session))
    }
}

extension BluetoothSession {
    /// A handle on each object that implements `Handle.interface` (below `ancestor` when given),
    /// in path order.
    func handles<Handle: BlueZObjectHandle>(_: Handle.Type, under ancestor: ObjectPath? = nil) -> [Handle] {
        paths(implementing: Handle.interface, under: ancestor).map { Handle(session: self, path: $0) }
    }
}
