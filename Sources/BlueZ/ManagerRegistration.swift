import DBus
import Synchronization

/// One of our exported objects registered with a bluetoothd manager on an adapter (LEAdvertisingManager1,
/// GattManager1): export bookkeeping, call, rollback, teardown and the adapter, for both. Exporting and unexporting are
/// the owner's, passed in as `export` and `unexport` (closures kept here would hold the owner alive).
final class ManagerRegistration: Sendable {
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
    private let state = Mutex(State())

    private struct State {
        var registeredOn: ObjectPath?  // as far as we know
        var exported = false
    }

    init(_ object: ObjectPath, with manager: Manager, in session: BluetoothSession) {
        self.session = session
        self.object = object
        self.manager = manager
    }

    var adapter: ObjectPath? { state.withLock { $0.registeredOn } }

    /// Exports the object unless exported, then registers it on `adapter`. When either fails, `unexport` removes what
    /// was exported: an export error comes back as a `BluetoothError`, bluetoothd's refusal unchanged.
    func register(on adapter: ObjectPath, export: () throws -> Void, unexport: () -> Void) async throws {
        let alreadyExported = state.withLock { state -> Bool in
            defer { state.exported = true }
            return state.exported
        }
        if !alreadyExported {
            do {
                try export()
            } catch {
                unexportIfExported(unexport)
                throw BluetoothError.from(error)
            }
        }
        do {
            _ = try await session.call(path: adapter, interface: manager.interface, method: manager.registerMethod,
                                       arguments: [.objectPath(object), .vardict([:])])
        } catch {
            unexportIfExported(unexport)
            throw error
        }
        state.withLock { $0.registeredOn = adapter }
    }

    /// Unregisters the object, if registered, then unexports it if exported. Errors are logged at debug and swallowed:
    /// on teardown bluetoothd or the adapter may be gone (and BlueZ then forgot the object anyway).
    func unregister(timeout: Duration = .seconds(25), unexport: () -> Void) async {
        let adapter = state.withLock { state -> ObjectPath? in
            defer { state.registeredOn = nil }
            return state.registeredOn
        }
        if let adapter {
            do {
                _ = try await session.call(path: adapter, interface: manager.interface, method: manager.unregisterMethod,
                                           arguments: [.objectPath(object)], timeout: timeout)
            } catch {
                session.logger.debug("\(manager.unregisterMethod)(\(object)) failed: \(error)")
            }
        }
        unexportIfExported(unexport)
    }

    /// How long the unregistration ending a scope may take. It runs outside the scope's cancellation, so a cancelled
    /// task leaves nothing registered; the limit keeps an unresponsive bluetoothd from holding the teardown (it forgets
    /// our objects anyway when it restarts or our connection closes).
    static let teardownLimit: Duration = .seconds(10)

    /// Registers on `adapter`, runs `body`, then unregisters, however `body` ends. Both calls run outside the caller's
    /// cancellation (see `outsideCancellation`).
    func withRegistration<Outcome>(
        on adapter: ObjectPath, export: @escaping @Sendable () throws -> Void, unexport: @escaping @Sendable () -> Void,
        isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Outcome
    ) async throws -> Outcome {
        try Task.checkCancellation()
        try await outsideCancellation { try await self.register(on: adapter, export: export, unexport: unexport) }
        let outcome: Result<Outcome, any Error>
        do {
            outcome = .success(try await body())
        } catch {
            outcome = .failure(error)
        }
        await unregisterOutsideCancellation(unexport: unexport)
        return try outcome.get()
    }

    /// `unregister`, run to its end (within `teardownLimit`) even when the task is cancelled.
    func unregisterOutsideCancellation(unexport: @escaping @Sendable () -> Void) async {
        _ = try? await outsideCancellation { await self.unregister(timeout: Self.teardownLimit, unexport: unexport) }
    }

    /// BlueZ dropped the object (it called `Release`): nothing to unregister; it stays exported for the next `register`.
    func forget() { state.withLock { $0.registeredOn = nil } }

    private func unexportIfExported(_ unexport: () -> Void) {
        let wasExported = state.withLock { state -> Bool in
            defer { state.exported = false }
            return state.exported
        }
        if wasExported { unexport() }
    }
}

/// Runs `work` to its end in a task of its own, even when the caller is cancelled: where registrations escape their
/// caller's cancellation (one abandoned halfway may still succeed in bluetoothd, so it runs to its end and is undone;
/// an unregistration must reach bluetoothd although the scope's task was cancelled).
func outsideCancellation<T: Sendable>(_ work: @escaping @Sendable () async throws -> T) async throws -> T {
    // Unstructured: a fresh task does not inherit the caller's cancellation (there is no cancellation shield).
    try await Task { try await work() }.value
}
