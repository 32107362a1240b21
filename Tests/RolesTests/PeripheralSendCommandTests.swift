import BlueZ
import Foundation
import Glibc
import Testing
import Transfer
import TestSupport

/// `bletransfer send` as a user runs it: exit statuses, one-line errors, signals, and a real
/// transfer from a piped standard input over BlueZoo.
@Suite(.serialized, .enabled(if: SendProcess.executable != nil, "needs the bletransfer executable built next to the tests"),
       .timeLimit(.minutes(2)))
struct PeripheralSendCommandTests {
    @Test("usage mistakes exit 64 with one line", arguments: [
        ["x", "--count", "0"],
        ["x", "--file", "/etc/hostname"],
        ["x", "--name", String(repeating: "n", count: 30)],
        ["x", "--count", "2", "--forever"],
        ["x", "--service-uuid", "not-a-uuid"],
    ])
    func usageMistakes(arguments: [String]) async throws {
        let result = try await SendProcess.run(arguments, bus: "unix:path=/nonexistent/bus")
        #expect(result.status == 64)
        #expect(result.standardOutput.isEmpty)
        #expect(!result.standardError.isEmpty)
    }

    @Test func missingOrDirectoryInputFileExits66() async throws {
        let missing = try await SendProcess.run(["--file", "/nonexistent/message.txt"], bus: "unix:path=/nonexistent/bus")
        #expect(missing.status == 66)
        #expect(missing.standardError == "bletransfer: error: cannot open '/nonexistent/message.txt': no such file\n")
        // A directory is sent as its tree; one without a regular file has nothing to send.
        let empty = NSTemporaryDirectory() + "empty-tree-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: empty + "/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: empty) }
        let directory = try await SendProcess.run(["--file", empty], bus: "unix:path=/nonexistent/bus")
        #expect(directory.status == 66)
        #expect(directory.standardError.contains("hold no regular file"))
    }

    @Test func emptyMessageExits65UnlessAllowed() async throws {
        let empty = try await SendProcess.run([""], bus: "unix:path=/nonexistent/bus")
        #expect(empty.status == 65)
        #expect(empty.standardError.contains("--allow-empty"))
        let emptyStandardInput = try await SendProcess.run([], bus: "unix:path=/nonexistent/bus", standardInput: [])
        #expect(emptyStandardInput.status == 65)
        // Allowed, it gets as far as the bus.
        let allowed = try await SendProcess.run(["", "--allow-empty"], bus: "unix:path=/nonexistent/bus")
        #expect(allowed.status == 69)
    }

    @Test func noSystemBusExits69WithJSONError() async throws {
        let result = try await SendProcess.run(["hello", "--json"], bus: "unix:path=/nonexistent/bus")
        #expect(result.status == 69)
        let line = try #require(result.standardOutput.split(separator: "\n").last)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["event"] as? String == "error")
        #expect(object["exitStatus"] as? Int == 69)
        // One error line and status's fix as its hint, the same in the event.
        let lines = result.standardError.split(separator: "\n")
        #expect(lines.count == 2 && lines[1].hasPrefix("hint: "), "\(result.standardError)")
        #expect(object["hint"] as? String == lines.last.map { String($0.dropFirst("hint: ".count)) })
    }

    @Test(.needsBlueZoo)
    func unknownAdapterExits64AndTimeoutExits75() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let unknown = try await SendProcess.run(["hello", "--adapter", "hci7"], bus: bus.address)
        #expect(unknown.status == 64)
        #expect(unknown.standardError.contains("hci7"))
        let timedOut = try await SendProcess.run(["hello", "--adapter", "hci0", "--timeout", "1"], bus: bus.address)
        #expect(timedOut.status == 75)
        #expect(timedOut.standardError.contains("timed out"))
    }

    @Test("SIGTERM and SIGINT unregister, then exit 143 / 130", .needsBlueZoo,
          arguments: [(SIGTERM, Int32(143)), (SIGINT, Int32(130))])
    func signalsExitAfterCleanup(signal: Int32, status: Int32) async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let process = try SendProcess.start(["hello", "--adapter", "hci0", "--forever", "--json"], bus: bus.address)
        #expect(await process.waitForOutput(containing: "\"event\":\"advertising\""))
        process.signal(signal)
        let result = await process.result()
        #expect(result.status == status)
        #expect(!result.standardError.contains("error"))
        // The last event says how the run ended.
        let last = try #require(result.standardOutput.split(separator: "\n").last)
        let event = try #require(try JSONSerialization.jsonObject(with: Data(last.utf8)) as? [String: Any])
        #expect(event["event"] as? String == "stopped" && event["reason"] as? String == "signal")
        #expect(event["signal"] as? String == (signal == SIGINT ? "SIGINT" : "SIGTERM") && event["exitStatus"] as? Int == Int(status))
    }

    /// The first hour: a run without authorized peers says so in one short line, once; a
    /// deadline that passes while the adapter is off names that, with the fix status gives.
    @Test(.needsBlueZoo)
    func aShortWarningOnceAndATimeoutThatNamesTheRealCause() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let home = NSTemporaryDirectory() + "first-hour-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let environment = ["XDG_CONFIG_HOME": home]
        let waited = try await SendProcess.run(["hello", "--adapter", "hci0", "--timeout", "1", "--json"], bus: bus.address,
                                               environment: environment)
        #expect(waited.status == 75)
        let warnings = waited.standardOutput.split(separator: "\n").filter { $0.contains("\"event\":\"warning\"") }
        #expect(warnings.count == 1)
        #expect(warnings.first?.contains("not authenticated: run 'bletransfer pair'") == true)
        let plain = try await SendProcess.run(["hello", "--adapter", "hci0", "--timeout", "1"], bus: bus.address,
                                              environment: environment)
        let warningLines = plain.standardError.split(separator: "\n").filter { $0.hasPrefix("bletransfer: warning: ") }
        #expect(warningLines.count == 1 && warningLines[0].count <= 100, "\(warningLines)")
        // Adapter powered off: the deadline says why nothing happened, and how to fix it.
        let session = try await bus.openSession()
        try await session.adapter(named: "hci0").setPowered(false)
        session.close()
        let off = try await SendProcess.run(["hello", "--adapter", "hci0", "--timeout", "1"], bus: bus.address)
        #expect(off.status == 75)
        #expect(off.standardError.contains("timed out after 1 s") && off.standardError.contains("hci0 is powered off"),
                "\(off.standardError)")
        #expect(off.standardError.contains("\nhint: rfkill unblock bluetooth && bluetoothctl power on"), "\(off.standardError)")
    }

    @Test("binary standard input arrives identical at a central", .needsBlueZoo)
    func standardInputOverBlueZoo() async throws {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let payload = CentralTestData.binary(20_000) + [0, 0x45, 0x4F, 0x4D]
        // Notifications: BlueZoo answers indications on an AcquireNotify socket with a byte
        // 0x01 (as BlueZ ≥ 5.7x does) but stalls after its first one; confirmed indications
        // are covered by PeripheralSubscriptionServerTests and the lab's stock-send-to-bleak.
        let process = try SendProcess.start(["--adapter", "hci0", "--json", "--compat-delivery", "notify"],
                                            bus: bus.address, standardInput: payload)
        let central = try await ScriptedCentral.connect(on: bus)
        let (_, message) = try await central.receive()
        let result = await process.result()
        await central.close()
        #expect(message?.payload == payload)
        #expect(result.status == 0)
        #expect(result.standardOutput.contains("\"event\":\"delivered\""))
        let last = try #require(result.standardOutput.split(separator: "\n").last)
        #expect(last.contains("\"event\":\"stopped\"") && last.contains("\"reason\":\"finished\""), "\(last)")
    }
}

/// The `bletransfer` executable run as a child process.
final class SendProcess: @unchecked Sendable {
    // @unchecked Sendable: the output buffers are only touched under `lock`; `process` is
    // thread-safe for the calls made here.
    private let process = Process()
    private let lock = NSLock()
    private var output = Data()
    private var errors = Data()
    private var outputWaiters: [(String, CheckedContinuation<Bool, Never>)] = []
    private var exited = false

    struct Result {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    /// Next to the test bundle, where `swift build` / `swift test` put it.
    static var executable: URL? {
        let candidate = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
            .appendingPathComponent("bletransfer")
        return FileManager.default.isExecutableFile(atPath: candidate.path) ? candidate : nil
    }

    static func run(_ arguments: [String], bus: String, standardInput: [UInt8]? = nil,
                    environment: [String: String] = [:]) async throws -> Result {
        try await start(arguments, bus: bus, standardInput: standardInput, environment: environment).result()
    }

    static func start(_ arguments: [String], bus: String, standardInput: [UInt8]? = nil,
                      environment: [String: String] = [:]) throws -> SendProcess {
        let child = SendProcess()
        try child.launch(arguments, bus: bus, standardInput: standardInput, extraEnvironment: environment)
        return child
    }

    private func launch(_ arguments: [String], bus: String, standardInput: [UInt8]?, extraEnvironment: [String: String]) throws {
        guard let executable = Self.executable else { throw CocoaError(.fileNoSuchFile) }
        process.executableURL = executable
        process.arguments = ["send"] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SYSTEM_BUS_ADDRESS"] = bus
        environment.merge(extraEnvironment) { _, new in new }
        process.environment = environment
        let outputPipe = Pipe()
        let errorPipe = Pipe()
        process.standardOutput = outputPipe
        process.standardError = errorPipe
        let inputPipe = Pipe()
        process.standardInput = inputPipe
        outputPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            self?.received(handle.availableData, error: false)
        }
        errorPipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            self?.received(handle.availableData, error: true)
        }
        // A child that exits before reading its input (a usage error) must not take the test
        // runner down with SIGPIPE; the write then just fails.
        _ = Glibc.signal(SIGPIPE, SIG_IGN)
        try process.run()
        let bytes = standardInput ?? []
        Thread.detachNewThread {
            try? inputPipe.fileHandleForWriting.write(contentsOf: Data(bytes))
            try? inputPipe.fileHandleForWriting.close()
        }
    }

    private func received(_ data: Data, error: Bool) {
        lock.lock()
        if error { errors.append(data) } else { output.append(data) }
        let text = String(decoding: output, as: UTF8.self)
        var ready: [(CheckedContinuation<Bool, Never>, Bool)] = []
        outputWaiters.removeAll { needle, continuation in
            let found = text.contains(needle)
            // An empty read is end of file: nothing more will come.
            guard found || (data.isEmpty && !error) else { return false }
            ready.append((continuation, found))
            return true
        }
        lock.unlock()
        for (continuation, found) in ready { continuation.resume(returning: found) }
    }

    /// True once standard output contains `needle`; false if it closed first.
    func waitForOutput(containing needle: String) async -> Bool {
        await withCheckedContinuation { continuation in
            lock.lock()
            if String(decoding: output, as: UTF8.self).contains(needle) {
                lock.unlock()
                continuation.resume(returning: true)
            } else if !process.isRunning {
                lock.unlock()
                continuation.resume(returning: false)
            } else {
                outputWaiters.append((needle, continuation))
                lock.unlock()
            }
        }
    }

    func signal(_ number: Int32) {
        kill(process.processIdentifier, number)
    }

    /// What `pipe` holds now, read without waiting for its end of file. The child has exited, so
    /// all it wrote is buffered; but a process another test spawned meanwhile (a private bus's
    /// dbus-daemon) may have inherited the write end and keep it open for minutes.
    private static func bufferedBytes(of pipe: Pipe) -> Data {
        let descriptor = pipe.fileHandleForReading.fileDescriptor
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) | O_NONBLOCK)
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count > 0 { data.append(contentsOf: buffer[0..<count]); continue }
            if count < 0, errno == EINTR { continue }
            return data   // 0: end of file; -1 with EAGAIN: nothing more buffered
        }
    }

    /// Waits for the process to exit (off the cooperative pool) and collects its output.
    func result() async -> Result {
        let process = self.process
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            Thread.detachNewThread {
                process.waitUntilExit()
                continuation.resume()
            }
        }
        // Drain what the handlers have not delivered yet, then tell waiters the output ended.
        if let pipe = process.standardOutput as? Pipe {
            pipe.fileHandleForReading.readabilityHandler = nil
            received(Self.bufferedBytes(of: pipe), error: false)
            received(Data(), error: false)
        }
        if let pipe = process.standardError as? Pipe {
            pipe.fileHandleForReading.readabilityHandler = nil
            received(Self.bufferedBytes(of: pipe), error: true)
        }
        return lock.withLock {
            Result(status: process.terminationStatus,
                   standardOutput: String(decoding: output, as: UTF8.self),
                   standardError: String(decoding: errors, as: UTF8.self))
        }
    }
}
