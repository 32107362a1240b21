import BlueZ
import DBus
import Foundation
import TestSupport
import Synchronization

// Test fixture: a private dbus-daemon (TestSupport's PrivateBus: nothing touches the machine's
// system bus) and, on it, the BlueZoo mock of org.bluez (`pip install bluezoo`), whose adapters
// see each other's advertisements and serve each other's GATT applications.
//
// BlueZoo picks its bus through sd-bus: `sd_bus_open_system()` honours
// DBUS_SYSTEM_BUS_ADDRESS, so the process gets the private bus address there.

/// A child process whose exit can be awaited without blocking a thread.
final class ChildProcess: Sendable {
    let process: Process
    private let exit = Mutex<(exited: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    init(executable: String, arguments: [String], environment: [String: String] = [:],
         standardOutput: Any? = nil, standardError: Any? = nil) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        process.environment = env
        if let standardOutput { process.standardOutput = standardOutput }
        if let standardError { process.standardError = standardError }
        self.process = process
        process.terminationHandler = { [weak self] _ in
            guard let self else { return }  // nobody is left to wait for the exit
            let waiters = self.exit.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.exited = true
                defer { state.waiters = [] }
                return state.waiters
            }
            for waiter in waiters { waiter.resume() }
        }
        try process.run()
    }

    func waitForExit() async {
        await withCheckedContinuation { continuation in
            let done = exit.withLock { state -> Bool in
                if state.exited { return true }
                state.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// SIGKILL, then wait for the exit. Not SIGTERM: children inherit the signal mask of the
    /// thread that spawned them, and the test runner's threads block SIGTERM, so the child
    /// would never see it.
    func stop() async {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        await waitForExit()
    }
}

/// BlueZoo running on a private bus.
final class BlueZoo: Sendable {
    let bus: PrivateBus
    private let process: Mutex<ChildProcess?>
    let logURL: URL

    private init(bus: PrivateBus, process: ChildProcess, logURL: URL) {
        self.bus = bus
        self.process = Mutex(process)
        self.logURL = logURL
    }

    /// Starts BlueZoo with auto-enabled adapters and a one-second scan interval (so a
    /// discovery finds advertisers at once and then every second).
    static func start(on bus: PrivateBus) throws -> BlueZoo {
        guard let executable = TestTools.bluezoo else { throw TestSetupError("bluezoo not found") }
        let logURL = bus.directory.appendingPathComponent("bluezoo-\(UUID().uuidString.prefix(4)).log")
        _ = FileManager.default.createFile(atPath: logURL.path, contents: nil)
        let log = try FileHandle(forWritingTo: logURL)
        let process = try ChildProcess(executable: executable, arguments: ["--auto-enable", "--scan-interval", "1", "-v"],
                                       environment: ["DBUS_SYSTEM_BUS_ADDRESS": bus.address],
                                       standardOutput: log, standardError: log)
        return BlueZoo(bus: bus, process: process, logURL: logURL)
    }

    /// Adds adapter hci<id> through BlueZoo's own org.bluezoo.Manager1 interface.
    func addAdapter(id: UInt8, address: String, using session: BluetoothSession) async throws {
        _ = try await session.connection.call(destination: "org.bluez", path: "/org/bluezoo",
                                              interface: "org.bluezoo.Manager1", method: "AddAdapter",
                                              arguments: [.byte(id), .string(address)])
    }

    func removeAdapter(id: UInt8, using session: BluetoothSession) async throws {
        _ = try await session.connection.call(destination: "org.bluez", path: "/org/bluezoo",
                                              interface: "org.bluezoo.Manager1", method: "RemoveAdapter",
                                              arguments: [.byte(id)])
    }

    func stop() async {
        let process = self.process.withLock { value -> ChildProcess? in
            defer { value = nil }
            return value
        }
        await process?.stop()
    }

    var log: String { (try? String(contentsOf: logURL, encoding: .utf8)) ?? "" }
}

struct TestSetupError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The addresses BlueZoo's adapters get in these tests.
enum TestAddress {
    static let hci0 = "00:11:22:33:44:01"
    static let hci1 = "00:11:22:33:44:02"
}

/// Waits until BlueZoo is fully up: it owns org.bluez a moment before it exports its objects,
/// and /org/bluez (exported after /org/bluezoo) is the last of them.
func waitForBlueZoo(_ session: BluetoothSession) async throws {
    try await session.waitUntil("BlueZoo serves org.bluez", timeout: .seconds(30)) { session in
        session.serviceState.isRunning && session.interfaces(at: "/org/bluez") != nil
    }
}

/// Runs `body` with a private bus, BlueZoo on it with `adapters` powered adapters (hci0 at
/// TestAddress.hci0, hci1 at TestAddress.hci1), and a session that already sees them.
/// Everything is torn down afterwards, also when `body` throws.
func withBlueZoo(adapters: Int = 2,
                 _ body: (_ zoo: BlueZoo, _ session: BluetoothSession) async throws -> Void) async throws {
    let bus = try await PrivateBus.start()
    var zoo: BlueZoo?
    var session: BluetoothSession?
    do {
        zoo = try BlueZoo.start(on: bus)
        let opened = try await BluetoothSession.open(address: bus.address)
        session = opened
        try await waitForBlueZoo(opened)
        let addresses = [TestAddress.hci0, TestAddress.hci1]
        for id in 0..<adapters {
            try await zoo!.addAdapter(id: UInt8(id), address: addresses[id], using: opened)
        }
        try await opened.waitUntil("\(adapters) powered adapters", timeout: .seconds(30)) { session in
            let list = session.adapters()
            return list.count == adapters && list.allSatisfy { $0.properties?.powered == true }
        }
        try await body(zoo!, opened)
    } catch {
        if let zoo { print("BlueZoo log:\n\(zoo.log)") }
        session?.close()
        await zoo?.stop()
        bus.stop()
        throw error
    }
    session?.close()
    await zoo?.stop()
    bus.stop()
}

/// Collects elements of `sequence` until `done` says the collection is complete; fails with a
/// description of what arrived when the stream ends or `timeout` (a safety net against a hung
/// test, not a speed assertion) passes first.
func collect<Element: Sendable>(_ sequence: AsyncStream<Element>, timeout: Duration = .seconds(30),
                                until done: @escaping @Sendable ([Element]) -> Bool) async throws -> [Element] {
    try await withThrowingTaskGroup(of: [Element]?.self) { group in
        group.addTask {
            var collected: [Element] = []
            for await element in sequence {
                collected.append(element)
                if done(collected) { return collected }
            }
            throw TestSetupError("stream ended after \(collected)")
        }
        group.addTask {
            try await Task.sleep(for: timeout)
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let result = first else {
            throw TestSetupError("timed out waiting on a stream")
        }
        return result
    }
}

/// The first element of `sequence` (with the same safety-net timeout).
func first<Element: Sendable>(_ sequence: AsyncStream<Element>, timeout: Duration = .seconds(30)) async throws -> Element {
    try await collect(sequence, timeout: timeout) { !$0.isEmpty }[0]
}
