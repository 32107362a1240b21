#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Foundation
import SystemPackage

/// One state assignment of systemd's notify protocol (sd_notify(3)).
package enum SystemdNotification: Sendable, Equatable {
    /// Start-up is finished; a `Type=notify` unit becomes active only after this.
    case ready
    /// A one-line status shown by `systemctl status`.
    case status(String)
    case stopping
    case watchdog

    /// The `KEY=VALUE` text sent on the wire; a status is forced onto one line, as the protocol separates by newlines.
    package var assignment: String {
        switch self {
        case .ready: "READY=1"
        case .status(let text): "STATUS=" + String(text.map { $0.isNewline || $0 == "\0" ? " " : $0 })
        case .stopping: "STOPPING=1"
        case .watchdog: "WATCHDOG=1"
        }
    }
}

package enum SystemdNotifyError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `$NOTIFY_SOCKET` names what we cannot reach (not a path or abstract `@` name, or too long for an address).
    case unsupportedSocketAddress(String)
    case sendFailed(String, Errno)

    package var description: String {
        switch self {
        case .unsupportedSocketAddress(let address):
            "NOTIFY_SOCKET=\(address) is not a socket path or abstract name this program can use"
        case .sendFailed(let address, let errno): "cannot notify systemd through \(address): \(errno)"
        }
    }
}

/// Speaks systemd's notify protocol without libsystemd: every notification is one datagram on the AF_UNIX socket
/// named by `$NOTIFY_SOCKET` (a file-system path, or an abstract name written with a leading `@`). Outside systemd
/// that variable is unset and every call is a no-op, so the daemon code can notify unconditionally.
package struct SystemdNotifier: Sendable {
    /// The socket address from `$NOTIFY_SOCKET`, or nil when not run under systemd.
    package let socketAddress: String?
    /// How often the watchdog wants a ping, or nil when the unit has no watchdog for us.
    package let watchdogTimeout: Duration?

    /// Reads `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` from `environment`.
    package init(environment: [String: String] = ProcessInfo.processInfo.environment, processID: Int32 = getpid()) {
        socketAddress = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        watchdogTimeout = socketAddress == nil
            ? nil : Self.watchdogTimeout(environment: environment, processID: processID)
    }

    package var isActive: Bool { socketAddress != nil }

    /// Sends the assignments in one newline-separated datagram; none outside systemd or for empty `notifications`.
    package func notify(_ notifications: [SystemdNotification]) throws(SystemdNotifyError) {
        guard let socketAddress, !notifications.isEmpty else { return }
        let datagram = notifications.map(\.assignment).joined(separator: "\n")
        try Self.send(Array(datagram.utf8), to: socketAddress)
    }

    /// `READY=1`, with a status line when given.
    package func ready(status: String? = nil) throws(SystemdNotifyError) {
        try notify([.ready] + (status.map { [.status($0)] } ?? []))
    }

    package func status(_ text: String) throws(SystemdNotifyError) { try notify([.status(text)]) }

    /// `STOPPING=1`, with a status line when given.
    package func stopping(status: String? = nil) throws(SystemdNotifyError) {
        try notify([.stopping] + (status.map { [.status($0)] } ?? []))
    }

    /// One watchdog ping; a no-op when the unit has no watchdog for this process.
    package func watchdogPing() throws(SystemdNotifyError) {
        guard watchdogTimeout != nil else { return }
        try notify([.watchdog])
    }

    /// How often to ping: half the watchdog timeout, as sd_watchdog_enabled(3) advises, so
    /// one late ping does not kill the service. Nil when there is no watchdog.
    package var watchdogPingInterval: Duration? { watchdogTimeout.map { $0 / 2 } }

    /// Pings the watchdog every `watchdogPingInterval` until cancelled; returns at once without a watchdog. A failed
    /// ping is reported to `onError` and the loop goes on: systemd, not this process, decides what a missed ping means.
    package func keepWatchdogAlive(onError: @Sendable (SystemdNotifyError) -> Void = { _ in }) async {
        guard let interval = watchdogPingInterval else { return }
        while !Task.isCancelled {
            do { try watchdogPing() } catch { onError(error) }
            do { try await Task.sleep(for: interval) } catch { return }
        }
    }

    /// Parses `WATCHDOG_USEC` (µs, positive), honouring `WATCHDOG_PID`: another process's watchdog is not ours.
    package static func watchdogTimeout(environment: [String: String], processID: Int32) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = UInt64(text), microseconds > 0,
              microseconds <= UInt64(Int64.max)
        else { return nil }
        if let pidText = environment["WATCHDOG_PID"] {
            guard let pid = Int32(pidText), pid == processID else { return nil }
        }
        return .microseconds(Int64(microseconds))
    }

    /// Sends one datagram to a path or `@abstract` AF_UNIX socket.
    static func send(_ datagram: [UInt8], to address: String) throws(SystemdNotifyError) {
        guard var socketAddress = UnixSocketAddress(address) else { throw .unsupportedSocketAddress(address) }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .sendFailed(address, Errno(rawValue: errno)) }
        defer { _ = close(fd) }
        let sent = datagram.withUnsafeBytes { bytes in
            socketAddress.withSockaddr { sockaddr, length in
                sendto(fd, bytes.baseAddress, bytes.count, Int32(MSG_NOSIGNAL), sockaddr, length)
            }
        }
        guard sent >= 0 else { throw .sendFailed(address, Errno(rawValue: errno)) }
    }
}

/// A `sockaddr_un` for a file-system path or, with a leading `@`, an abstract name.
struct UnixSocketAddress {
    private var storage = sockaddr_un()
    private let length: socklen_t

    init?(_ address: String) {
        storage.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: storage.sun_path)
        var bytes: [UInt8]
        let isAbstract = address.hasPrefix("@")
        if isAbstract {
            // Abstract names start with a NUL byte, not NUL-terminated: the length passed to the kernel delimits them.
            bytes = [0] + Array(address.utf8.dropFirst())
            guard bytes.count > 1, bytes.count <= capacity else { return nil }
        } else {
            guard address.hasPrefix("/"), !address.utf8.contains(0) else { return nil }
            bytes = Array(address.utf8)
            guard bytes.count < capacity else { return nil }
        }
        withUnsafeMutableBytes(of: &storage.sun_path) { path in
            path.copyBytes(from: bytes)
        }
        let pathOffset = MemoryLayout<sockaddr_un>.offset(of: \.sun_path)!
        length = socklen_t(pathOffset + bytes.count + (isAbstract ? 0 : 1))
    }

    mutating func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        let length = self.length
        return withUnsafePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}
