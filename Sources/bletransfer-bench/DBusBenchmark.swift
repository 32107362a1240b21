import ArgumentParser
import DaemonSupport
import DBus
import Foundation
import TestSupport
import Transfer

/// Method-call round-trips through a private dbus-daemon, measured for our connection and, in
/// the same run, for established clients calling the same exported method: `dbus-send` (one
/// process per call) and a long-lived Python client (dbus-fast, or dbus-next) when installed.
/// Reports calls per second and our resident memory at the start, middle and end of the loop.
struct DBusBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dbus",
        abstract: "D-Bus round-trips per second and resident memory, next to dbus-send and a Python client.")

    @Option(help: "Round-trips made by our client (sequential, then pipelined).")
    var iterations = 100_000

    @Option(help: "Calls made with dbus-send (one process each; extrapolated).")
    var dbusSendIterations = 1_000

    @Option(help: "Calls made by the long-lived Python client.")
    var pythonIterations = 20_000

    @Option(help: "Calls in flight at once in the pipelined run.")
    var inFlight = 32

    func run() async throws {
        let bus = try await PrivateBus.start()
        defer { bus.stop() }
        let server = try await DBusConnection.connect(address: bus.address)
        let client = try await DBusConnection.connect(address: bus.address)
        defer {
            client.close()
            server.close()
        }
        try server.export(
            [DBusInterface(name: "org.example.Bench", methods: [
                DBusMethod(name: "Echo", in: "u", out: "u") { call in call.arguments }
            ])], at: "/bench")
        let destination = server.uniqueName
        @Sendable func echo(_ value: UInt32) async throws {
            let reply = try await client.call(
                destination: destination, path: "/bench", interface: "org.example.Bench", method: "Echo",
                arguments: [.uint32(value)])
            guard reply.first?.uint32 == value else { throw ValidationError("wrong reply \(reply)") }
        }

        print("D-Bus round-trips through a private dbus-daemon (\(bus.address.prefix(40))...)")
        print("method: org.example.Bench.Echo(u) -> u, exported by our second connection in this process\n")

        // Warm-up, so the first RSS sample includes the steady-state allocations.
        for index in 0..<1_000 { try await echo(UInt32(index)) }

        let rssStart = residentMemoryKiB()
        var rssMiddle = rssStart
        let clock = ContinuousClock()
        let start = clock.now
        for index in 0..<iterations {
            try await echo(UInt32(truncatingIfNeeded: index))
            if index == iterations / 2 { rssMiddle = residentMemoryKiB() }
        }
        let sequential = start.duration(to: clock.now)
        let rssEnd = residentMemoryKiB()
        let ourRate = Double(iterations) / sequential.seconds

        let pipelinedStart = clock.now
        try await pipelinedEchoes(echo)
        let pipelined = pipelinedStart.duration(to: clock.now)
        let pipelinedRate = Double(iterations) / pipelined.seconds
        let rssAfterPipelined = residentMemoryKiB()

        let pingStart = clock.now
        let pings = max(1, iterations / 5)
        for _ in 0..<pings {
            try await client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus.Peer", method: "Ping")
        }
        let pingRate = Double(pings) / pingStart.duration(to: clock.now).seconds

        print("ours, sequential     \(iterations) calls  \(format(sequential.seconds, digits: 2)) s  \(format(ourRate, digits: 0)) calls/s")
        print("ours, \(inFlight) in flight    \(iterations) calls  \(format(pipelined.seconds, digits: 2)) s  \(format(pipelinedRate, digits: 0)) calls/s")
        print("ours, bus Peer.Ping  \(pings) calls  \(format(pingRate, digits: 0)) calls/s")
        print("resident memory (KiB): start \(rssStart)  middle \(rssMiddle)  end \(rssEnd)  after pipelined \(rssAfterPipelined)")
        let growth = rssEnd - rssMiddle
        print("second-half growth: \(growth) KiB over \(iterations - iterations / 2) calls"
            + (growth < 1024 ? " (flat)" : " (NOT flat)"))

        print("")
        try await printBaselines(address: bus.address, destination: destination, ourRate: ourRate)
    }

    /// `iterations` echoes with `inFlight` calls in flight at once.
    private func pipelinedEchoes(_ echo: @escaping @Sendable (UInt32) async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            var issued = 0
            while issued < min(inFlight, iterations) {
                let value = UInt32(issued)
                group.addTask { try await echo(value) }
                issued += 1
            }
            while try await group.next() != nil {
                if issued < iterations {
                    let value = UInt32(truncatingIfNeeded: issued)
                    group.addTask { try await echo(value) }
                    issued += 1
                }
            }
        }
    }

    /// The external clients' rates beside ours.
    private func printBaselines(address: String, destination: String, ourRate: Double) async throws {
        if let dbusSendRate = try await measureDBusSend(address: address, destination: destination) {
            print("dbus-send, one process per call  \(dbusSendIterations) calls  \(format(dbusSendRate, digits: 0)) calls/s"
                + "  (extrapolated to \(iterations): \(format(Double(iterations) / dbusSendRate, digits: 1)) s)")
            print("ratio ours / dbus-send: \(format(ourRate / dbusSendRate, digits: 1))x")
        } else {
            print("dbus-send not found (apt package 'dbus'): skipped")
        }
        if let (library, pythonRate) = try await measurePython(address: address, destination: destination) {
            print("python \(library), long-lived client  \(pythonIterations) calls  \(format(pythonRate, digits: 0)) calls/s")
            print("ratio ours / \(library): \(format(ourRate / pythonRate, digits: 2))x")
        } else {
            print("python3 with dbus-fast or dbus-next not available: skipped")
        }
    }

    // MARK: Baselines

    func measureDBusSend(address: String, destination: String) async throws -> Double? {
        let path = "/usr/bin/dbus-send"
        guard FileManager.default.isExecutableFile(atPath: path) else { return nil }
        let arguments = [
            "--bus=\(address)", "--print-reply", "--dest=\(destination)", "/bench", "org.example.Bench.Echo", "uint32:7",
        ]
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<dbusSendIterations {
            let status = try await runProcess(path, arguments, output: nil)
            guard status == 0 else { throw ValidationError("dbus-send failed with status \(status)") }
        }
        return Double(dbusSendIterations) / start.duration(to: clock.now).seconds
    }

    func measurePython(address: String, destination: String) async throws -> (String, Double)? {
        let script = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-dbus-bench-\(getpid()).py")
        try Self.pythonClient.write(to: script, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: script) }
        let output = Pipe()
        let status = try await runProcess(
            "/usr/bin/env", ["python3", script.path, address, destination, String(pythonIterations)], output: output)
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard status == 0 else { return nil }
        let fields = text.split(whereSeparator: \.isWhitespace)
        guard fields.count >= 3, let calls = Double(fields[1]), let seconds = Double(fields[2]), seconds > 0 else {
            return nil
        }
        return (String(fields[0]), calls / seconds)
    }

    static let pythonClient = """
        import asyncio, sys, time
        try:
            from dbus_fast.aio import MessageBus
            from dbus_fast import Message
            library = "dbus-fast"
        except ImportError:
            from dbus_next.aio import MessageBus
            from dbus_next import Message
            library = "dbus-next"

        async def main(address, destination, count):
            bus = await MessageBus(bus_address=address).connect()
            def echo(value):
                return Message(destination=destination, path="/bench", interface="org.example.Bench",
                               member="Echo", signature="u", body=[value])
            for value in range(500):
                await bus.call(echo(value))
            start = time.perf_counter()
            for value in range(count):
                reply = await bus.call(echo(value))
                if reply.body[0] != value:
                    raise SystemExit("wrong reply")
            print(library, count, time.perf_counter() - start)

        asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
        """
}

// MARK: - Helpers

/// Runs a program to completion without blocking a cooperative thread.
private func runProcess(_ path: String, _ arguments: [String], output: Pipe?) async throws -> Int32 {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    process.standardOutput = output ?? FileHandle.nullDevice
    process.standardError = FileHandle.nullDevice
    return try await withCheckedThrowingContinuation { continuation in
        process.terminationHandler = { continuation.resume(returning: $0.terminationStatus) }
        do { try process.run() } catch { continuation.resume(throwing: error) }
    }
}

/// Resident set size in KiB (0 where /proc/self/statm is missing).
private func residentMemoryKiB() -> Int { (ProcessMemory.residentBytes() ?? 0) / 1024 }

