import DBus
import Foundation
import Synchronization
import TestSupport

/// A private bus with two connections to it: `server` exports, `client` calls.
struct BusFixture: Sendable {
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection

    static func start() async throws -> BusFixture {
        let bus = try await PrivateBus.start()
        let server = try await DBusConnection.connect(address: bus.address)
        let client = try await DBusConnection.connect(address: bus.address)
        return BusFixture(bus: bus, server: server, client: client)
    }

    /// A fixture whose server has exported what `export` exports (stopped again if that fails).
    static func start(exporting export: (DBusConnection) throws -> Void) async throws -> BusFixture {
        let fixture = try await start()
        do {
            try export(fixture.server)
        } catch {
            fixture.stop()
            throw error
        }
        return fixture
    }

    func stop() {
        client.close()
        server.close()
        bus.stop()
    }

    /// Calls `interface.method` on `path` of the server, from the client.
    @discardableResult
    func call(
        _ path: ObjectPath, _ interface: String, _ method: String, _ arguments: [DBusValue] = [],
        timeout: Duration = .seconds(10)
    ) async throws -> [DBusValue] {
        try await client.call(
            destination: server.uniqueName, path: path, interface: interface, method: method,
            arguments: arguments, timeout: timeout)
    }

    /// Match rules the bus holds for a connection (org.freedesktop.DBus.Debug.Stats).
    func matchRuleCount(of connection: DBusConnection) async throws -> UInt32? {
        let stats = try await client.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus.Debug.Stats", method: "GetConnectionStats",
            arguments: [.string(connection.uniqueName)])
        return stats.first?.vardict?["MatchRules"]?.uint32
    }

    /// `matchRuleCount(of:)` once the bus has processed what the client sent before (a Ping
    /// answered after it).
    func settledMatchRuleCount(of connection: DBusConnection) async throws -> UInt32? {
        _ = try await client.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus.Peer",
            method: "Ping")
        return try await matchRuleCount(of: connection)
    }
}

/// A one-shot signal tasks can wait for; `open()` releases every waiter, now and later.
extension BusFixture {
    /// Exports `org.example.Slow.Hang` at /slow on the server: each call opens `entered`, then
    /// answers only once `release` opens (open it when the test ends).
    func exportHang() throws -> (entered: Gate, release: Gate) {
        let entered = Gate()
        let release = Gate()
        try server.export(
            [DBusInterface(name: "org.example.Slow", methods: [
                DBusMethod(name: "Hang") { _ in
                    entered.open()
                    await release.wait()
                    return []
                }
            ])], at: "/slow")
        return (entered, release)
    }
}

final class Gate: Sendable {
    private let state = Mutex<(open: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    func open() {
        let waiters = state.withLock { state in
            state.open = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    func wait() async {
        await withCheckedContinuation { continuation in
            let isOpen = state.withLock { state in
                if !state.open { state.waiters.append(continuation) }
                return state.open
            }
            if isOpen { continuation.resume() }
        }
    }
}

/// Runs an external program to completion without blocking a cooperative thread. Its output
/// goes to a file, not a pipe: a pipe's write end may be inherited by a process another test
/// spawns meanwhile, and reading to end of file would then wait for that process too.
func runTool(_ path: String, _ arguments: [String]) async throws -> (status: Int32, output: String) {
    let outputURL = FileManager.default.temporaryDirectory.appendingPathComponent("bus-tool-\(UUID().uuidString)")
    _ = FileManager.default.createFile(atPath: outputURL.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: outputURL) }
    let output = try FileHandle(forWritingTo: outputURL)
    defer { try? output.close() }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = output
    process.standardError = output
    let status: Int32 = try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { finished in continuation.resume(returning: finished.terminationStatus) }
        do { try process.run() } catch { continuation.resume(throwing: error) }
    }
    let data = try Data(contentsOf: outputURL)
    return (status, String(decoding: data, as: UTF8.self))
}
