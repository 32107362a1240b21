import DBus
import Synchronization

/// One of our exported objects registered with a bluetoothd manager on an adapter
/// (LEAdvertisingManager1 for an advertisement, GattManager1 for a GATT application): the
/// same call, rollback, teardown and record of the adapter for both.
final class ManagerRegistration: Sendable {
    /// A bluetoothd manager interface and its pair of methods.
    struct Manager: Sendable {
        let interface: String
        let registerMethod: String
        let unregisterMethod: String

        static let advertising = Manager(interface: BlueZInterface.advertisingManager,
                                         registerMethod: "RegisterAdvertisement",
                                         unregisterMethod: "UnregisterAdvertisement")
        static let gatt = Manager(interface: BlueZInterface.gattManager,
                                  registerMethod: "RegisterApplication",
                                  unregisterMethod: "UnregisterApplication")
    }

    private let session: BluetoothSession
    private let object: ObjectPath
    private let manager: Manager
    /// The adapter bluetoothd has the object registered on, as far as we know.
    private let registeredOn = Mutex<ObjectPath?>(nil)

    init(_ object: ObjectPath, with manager: Manager, in session: BluetoothSession) {
        self.session = session
        self.object = object
        self.manager = manager
    }

    var adapter: ObjectPath? { registeredOn.withLock { $0 } }

    /// Registers the object with the manager on `adapter`; when bluetoothd refuses, runs
    /// `rollback` (unexport what was exported for it) and rethrows BlueZ's error unchanged.
    func register(on adapter: ObjectPath, rollback: () -> Void) async throws {
        do {
            _ = try await session.call(path: adapter, interface: manager.interface, method: manager.registerMethod,
                                       arguments: [.objectPath(object), .vardict([:])])
        } catch {
            rollback()
            throw error
        }
        registeredOn.withLock { $0 = adapter }
    }

    /// Unregisters the object from the adapter it is registered on, if any. Errors are
    /// logged at debug and swallowed: this runs on teardown, when bluetoothd or the adapter may
    /// already be gone (and BlueZ then forgot the object anyway).
    func unregister() async {
        let adapter = registeredOn.withLock { registeredOn -> ObjectPath? in
            defer { registeredOn = nil }
            return registeredOn
        }
        guard let adapter else { return }
        do {
            _ = try await session.call(path: adapter, interface: manager.interface, method: manager.unregisterMethod,
                                       arguments: [.objectPath(object)])
        } catch {
            session.logger.debug("\(manager.unregisterMethod)(\(object)) failed: \(error)")
        }
    }

    /// BlueZ dropped the object on its own (it called `Release`): nothing to unregister.
    func forget() {
        registeredOn.withLock { $0 = nil }
    }
}
