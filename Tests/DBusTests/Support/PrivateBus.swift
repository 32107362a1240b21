import Foundation

/// A private `dbus-daemon` for one test: started with a permissive configuration on a socket
/// in a fresh temporary directory, stopped (and the directory removed) by `stop()` or deinit.
///
/// The daemon runs `--nofork --print-address`; the first line it prints is the address to
/// connect to, so the bus is ready as soon as `start()` returns.
final class PrivateBus: Sendable {
    let address: String
    let directory: URL
    private let process: Process

    enum StartError: Error, CustomStringConvertible {
        case daemonMissing(String)
        case noAddress(String)
        var description: String {
            switch self {
            case .daemonMissing(let path): "dbus-daemon not found at \(path) (apt package 'dbus')"
            case .noAddress(let output): "dbus-daemon printed no address: \(output)"
            }
        }
    }

    static let daemonPath = "/usr/bin/dbus-daemon"

    static func start() throws -> PrivateBus {
        guard FileManager.default.isExecutableFile(atPath: daemonPath) else {
            throw StartError.daemonMissing(daemonPath)
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("bletransfer-bus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        try configuration(socketDirectory: directory.path).write(to: config, atomically: true, encoding: .utf8)

        let process = Process()
        process.executableURL = URL(fileURLWithPath: daemonPath)
        process.arguments = ["--config-file=\(config.path)", "--nofork", "--print-address=1", "--nopidfile"]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()

        // The address is the first line the daemon prints once it listens.
        var printed = Data()
        while !printed.contains(UInt8(ascii: "\n")) {
            let chunk = output.fileHandleForReading.availableData
            if chunk.isEmpty { break }  // the daemon exited
            printed.append(chunk)
        }
        let text = String(decoding: printed, as: UTF8.self)
        guard let line = text.split(separator: "\n").first, line.hasPrefix("unix:") else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw StartError.noAddress(text)
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
    func stop() {
        if process.isRunning {
            // SIGKILL, not terminate(): the daemon inherits the signal mask of the thread that
            // spawned it, and test threads may block SIGTERM.
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// Anyone may own any name and send anything: tests are about our code, not bus policy.
    static func configuration(socketDirectory: String) -> String {
        """
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
          </policy>
        </busconfig>
        """
    }
}
