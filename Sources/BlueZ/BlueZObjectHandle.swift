import DBus

/// What `Adapter`, `Device`, `RemoteGATTService` and `RemoteGATTCharacteristic` share: a session and the path of one
/// object in bluetoothd's tree. Properties are read from the cache each time, so a handle never goes stale, and two
/// handles are equal when they name the same path through the same session. Internal on purpose: the handles' public
/// API stays their own; this writes identity, the cache lookup and the listing once. `init(session:path:)` is each
/// handle's memberwise one.
protocol BlueZObjectHandle: Hashable, Sendable {
    static var interface: String { get }  // what makes an object this kind of handle
    var session: BluetoothSession { get }
    var path: ObjectPath { get }
    init(session: BluetoothSession, path: ObjectPath)
}

extension BlueZObjectHandle {
    /// Properties on `Self.interface` as last heard; nil once BlueZ removed the object (or before it announced it).
    var cachedProperties: [String: DBusValue]? { session.properties(of: path, interface: Self.interface) }

    public static func == (lhs: Self, rhs: Self) -> Bool {
        lhs.path == rhs.path && lhs.session === rhs.session
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(path)
        hasher.combine(ObjectIdentifier(session))
    }
}

extension BluetoothSession {
    /// A handle on each object implementing `Handle.interface` (below `ancestor` when given), in path order.
    func handles<Handle: BlueZObjectHandle>(_: Handle.Type, under ancestor: ObjectPath? = nil) -> [Handle] {
        paths(implementing: Handle.interface, under: ancestor).map { Handle(session: self, path: $0) }
    }
}
