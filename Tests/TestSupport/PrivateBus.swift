import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a private bus, or the mock on it, did not come up.
package enum TestBusStartError: Error, CustomStringConvertible {
    case missing(String)
    case noAddress(String)
    case mockDidNotStart(String)

    package var description: String {
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
package final class PrivateBus: Sendable {
    package enum Policy: Sendable {
        /// Anyone may own any name and call anything: tests are about our code, not bus policy.
        case permissive
        /// Like permissive, but nobody may send to org.bluez (AccessDenied, as on a locked-down host).
        case denyBlueZ
    }

    package let address: String
    package let directory: URL
    private let process: SpawnedProcess

    package static let daemonPath = "/usr/bin/dbus-daemon"

    package static func start(policy: Policy = .permissive) async throws -> PrivateBus {
        guard FileManager.default.isExecutableFile(atPath: daemonPath) else {
            throw TestBusStartError.missing("dbus-daemon at \(daemonPath) (apt package 'dbus')")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("bletransfer-bus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("bus.conf")
        try configuration(socketDirectory: directory.path, policy: policy)
            .write(to: config, atomically: true, encoding: .utf8)

        var ends: [Int32] = [-1, -1]
        // Close-on-exec so that other tests' children do not inherit it (pipe2 is not exported
        // to Swift; the window between the two calls only costs a copy that ends with its child).
        guard pipe(&ends) == 0 else { throw SpawnError(call: "pipe", errno: errno) }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let (readEnd, writeEnd) = (ends[0], ends[1])
        let process: SpawnedProcess
        do {
            process = try SpawnedProcess(
                executable: daemonPath,
                arguments: ["--config-file=\(config.path)", "--nofork", "--print-address=1", "--nopidfile"],
                standardOutput: .descriptor(writeEnd))
        } catch {
            close(readEnd)
            close(writeEnd)
            throw error
        }
        close(writeEnd)

        // The address is the first line the daemon prints once it listens. The read blocks, so
        // it runs off the cooperative pool (parallel tests would starve it).
        let printed = await withCheckedContinuation { (continuation: CheckedContinuation<[UInt8], Never>) in
            DispatchQueue.global().async {
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 512)
                while !bytes.contains(UInt8(ascii: "\n")) {
                    let count = chunk.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
                    if count < 0 && errno == EINTR { continue }
                    if count <= 0 { break }  // the daemon exited
                    bytes += chunk[..<count]
                }
                close(readEnd)
                continuation.resume(returning: bytes)
            }
        }
        let text = String(decoding: printed, as: UTF8.self)
        guard let line = text.split(separator: "\n").first, line.hasPrefix("unix:") else {
            process.stop()
            try? FileManager.default.removeItem(at: directory)
            throw TestBusStartError.noAddress(text)
        }
        return PrivateBus(address: String(line), directory: directory, process: process)
    }

    private init(address: String, directory: URL, process: SpawnedProcess) {
        self.address = address
        self.directory = directory
        self.process = process
    }

    deinit { stop() }

    /// Kills the daemon (every connection to it is lost) and removes its directory. Idempotent.
    package func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: directory)
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
