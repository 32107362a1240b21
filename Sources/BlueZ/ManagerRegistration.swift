import DBus

/// Registering one of our exported objects with a bluetoothd manager on an adapter
/// (LEAdvertisingManager1 for an advertisement, GattManager1 for a GATT application): the
/// same call, rollback and teardown for both.
extension BluetoothSession {
    /// Calls `method(object, {})` on `adapter`'s `manager`; when bluetoothd refuses, runs
    /// `rollback` (unexport what was exported for it) and rethrows BlueZ's error unchanged.
    func register(_ object: ObjectPath, on adapter: ObjectPath, manager: String, method: String,
                  rollback: () -> Void) async throws {
        do {
            _ = try await call(path: adapter, interface: manager, method: method,
                               arguments: [.objectPath(object), .vardict([:])])
        } catch {
            rollback()
            throw error
        }
    }

    /// Calls `method(object)` on `adapter`'s `manager` when there is an adapter. Errors are
    /// logged at debug and swallowed: this runs on teardown, when bluetoothd or the adapter may
    /// already be gone (and BlueZ then forgot the object anyway).
    func unregister(_ object: ObjectPath, from adapter: ObjectPath?, manager: String, method: String) async {
        guard let adapter else { return }
        do {
            _ = try await call(path: adapter, interface: manager, method: method, arguments: [.objectPath(object)])
        } catch {
            logger.debug("\(method)(\(object)) failed: \(error)")
        }
    }
}
