import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A `bletransfer daemon` process under test, on a private bus: its `--json` lines are read as
/// they come (tests wait for events, not for time), its log goes to a file for diagnostics.
final class DaemonProcess: Sendable {
    let process: Process
    let logFile: URL
    private let lines: Mutex<[String]>
    private let waiters: Mutex<[UUID: AsyncStream<Void>.Continuation]>
    private let exit: Mutex<Int32?>

    /// The `bletransfer` executable next to the test bundle (built with the tests).
    static var executable: URL? {
        guard let test = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return nil }
        let url = URL(fileURLWithPath: test).deletingLastPathComponent().appendingPathComponent("bletransfer")
        return FileManager.default.isExecutableFile(atPath: url.path) ? url : nil
    }

    init(arguments: [String], busAddress: String, logFile: URL) throws {
        guard let executable = Self.executable else { throw CocoaError(.fileNoSuchFile) }
        self.logFile = logFile
        lines = Mutex([])
        waiters = Mutex([:])
        exit = Mutex(nil)
        process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = busAddress
        environment.removeValue(forKey: "NOTIFY_SOCKET")
        process.environment = environment
        _ = FileManager.default.createFile(atPath: logFile.path, contents: nil)
        process.standardError = try FileHandle(forWritingTo: logFile)
        let output = Pipe()
        process.standardOutput = output
        let pending = Mutex(Data())
        output.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let chunk = handle.availableData
            if chunk.isEmpty {
                handle.readabilityHandler = nil
                self?.wakeWaiters()
                return
            }
            let complete: [String] = pending.withLock { buffer in
                buffer.append(chunk)
                var found: [String] = []
                while let newline = buffer.firstIndex(of: UInt8(ascii: "\n")) {
                    found.append(String(decoding: buffer[buffer.startIndex..<newline], as: UTF8.self))
                    buffer.removeSubrange(buffer.startIndex...newline)
                }
                return found
            }
            guard !complete.isEmpty else { return }
            self?.lines.withLock { $0.append(contentsOf: complete) }
            self?.wakeWaiters()
        }
        process.terminationHandler = { [weak self] finished in
            self?.exit.withLock { $0 = finished.terminationStatus }
            self?.wakeWaiters()
        }
        try process.run()
    }

    private func wakeWaiters() {
        for waiter in waiters.withLock({ Array($0.values) }) { waiter.yield() }
    }

    /// The JSON objects printed so far whose "event" is `name`.
    func events(_ name: String) -> [[String: Any]] {
        lines.withLock { $0 }.compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  object["event"] as? String == name
            else { return nil }
            return object
        }
    }

    /// Waits until `condition` holds, re-checked whenever the process prints or exits. False
    /// when the process exited first.
    func wait(until condition: @escaping () -> Bool) async -> Bool {
        let id = UUID()
        let (changes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        waiters.withLock { $0[id] = continuation }
        defer { _ = waiters.withLock { $0.removeValue(forKey: id) } }
        continuation.yield()
        for await _ in changes {
            if condition() { return true }
            if exitStatus != nil { return condition() }
        }
        return condition()
    }

    /// Waits until `count` events named `name` were printed.
    func waitForEvents(_ name: String, count: Int) async -> Bool {
        await wait { self.events(name).count >= count }
    }

    var exitStatus: Int32? { exit.withLock { $0 } }

    /// Sends SIGTERM and waits for the exit status.
    func terminate() async -> Int32? {
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGTERM) }
        _ = await wait { self.exitStatus != nil }
        return exitStatus
    }

    /// Ends the process for good (test clean-up after a failure).
    func kill() {
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
    }

    var log: String { (try? String(contentsOf: logFile, encoding: .utf8)) ?? "" }
}
