import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a private bus, or the mock on it, did not come up.
public enum TestBusStartError: Error, CustomStringConvertible {
    case missing(String)
    case noAddress(String)
    case mockDidNotStart(String)

    public var description: String {
        switch self {
        case .missing(let what): "\(what) is not installed"
        case .noAddress(let output): "dbus-daemon printed no address: \(output)"
        case .mockDidNotStart(let log): "bluezoo did not bring up its adapters: \(log)"
        }
    }
}

/// A private `dbus-daemon` for one test, so nothing touches the machine's own buses: started
/// with a permissive configuration on a socket in a fresh temporary directory, stopped (and the
/// directory removed) by `stop()` or deinit.
///
/// The daemon runs `--nofork --print-address`; the first line it prints is the address to
/// connect to, so the bus is ready as soon as `start()` returns.
public final class PrivateBus: Sendable {
    public enum Policy: Sendable {
        /// Anyone may own any name and call anything: tests are about our code, not bus policy.
        case permissive
        /// Like permissive, but nobody may send to org.bluez (AccessDenied, as on a locked-down host).
        case denyBlueZ
    }

    public let address: String
    public let directory: URL
    private let process: Process

    public static let daemonPath = "/usr/bin/dbus-daemon"

    public static func start(policy: Policy = .permissive) async throws -> PrivateBus {
        guard FileManager.default.isExecutableFile(atPath: daemonPath) else {
            throw TestBusStartError.missing("dbus-daemon at \(daemonPath) (apt package 'dbus')")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("bletransfer-bus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        try configuration(socketDirectory: directory.path, policy: policy)
            .write(to: config, atomically: true, encoding: .utf8)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: daemonPath)
        process.arguments = ["--config-file=\(config.path)", "--nofork", "--print-address=1", "--nopidfile"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()

        // The address is the first line the daemon prints once it listens. The read blocks, so
        // it runs off the cooperative pool (parallel tests would starve it).
        let handle = output.fileHandleForReading
        let printed = await withCheckedContinuation { (continuation: CheckedContinuation<Data, Never>) in
            DispatchQueue.global().async {
                var bytes = Data()
                while !bytes.contains(UInt8(ascii: "\n")) {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }  // the daemon exited
                    bytes.append(chunk)
                }
                continuation.resume(returning: bytes)
            }
        }
        let text = String(decoding: printed, as: UTF8.self)
        guard let line = text.split(separator: "\n").first, line.hasPrefix("unix:") else {
            killAndWait(process)
            try? FileManager.default.removeItem(at: directory)
            throw TestBusStartError.noAddress(text)
        }
        return PrivateBus(address: String(line), directory: directory, process: process)
    }

    private init(address: String, directory: URL, process: Process) {
        self.address = address
        self.directory = directory
        self.process = process
    }

    deinit { stop() }

    /// Kills the daemon (every connection to it is lost) and removes its directory. Idempotent.
    public func stop() {
        Self.killAndWait(process)
        try? FileManager.default.removeItem(at: directory)
    }

    /// SIGKILL, not SIGTERM: children inherit the signal mask of the thread that spawned them,
    /// and the test runner's threads block SIGTERM, so a child would never see it.
    public static func killAndWait(_ process: Process) {
        guard process.isRunning else { return }
        _ = kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    static func configuration(socketDirectory: String, policy: Policy) -> String {
        let deny = policy == .denyBlueZ ? #"<deny send_destination="org.bluez"/>"# : ""
        return """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:dir=\(socketDirectory)</listen>
              <auth>EXTERNAL</auth>
              <!-- as in Debian's session.conf; the built-in default (128) is the system bus's -->
              <limit name="max_replies_per_connection">50000</limit>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*" eavesdrop="true"/>
                <allow receive_sender="*"/>
                <allow eavesdrop="true"/>
                \(deny)
              </policy>
            </busconfig>
            """
    }
}
