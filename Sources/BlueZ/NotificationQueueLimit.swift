import Foundation

/// How many values the kernel queues on an AcquireNotify socket before bluetoothd's next write fails:
/// `net.unix.max_dgram_qlen`, taken by an AF_UNIX socket pair when created. bluetoothd writes notifications without
/// blocking and silently drops one that does not fit, so a receiver lagging by more loses data (framed transfers
/// notice the gap and fail; Apple's format cannot). The kernel's default is 10; systemd raises it to 512 at boot
/// (sysctl.d/50-default.conf), as on a stock Debian host; containers and hosts without systemd often keep 10.
public struct NotificationQueueLimit: Sendable, Equatable, Codable {
    public static let path = "/proc/sys/net/unix/max_dgram_qlen"
    /// What a stock systemd host sets, and what bletransfer is tested with.
    public static let recommended = 512

    public var datagrams: Int?

    public init(datagrams: Int?) {
        self.datagrams = datagrams
    }

    public static func current() -> NotificationQueueLimit {
        let text = try? String(contentsOfFile: path, encoding: .utf8)
        return NotificationQueueLimit(datagrams: text.flatMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
    }

    public var isSufficient: Bool { (datagrams ?? Self.recommended) >= Self.recommended }

    public var summary: String {
        guard let datagrams else { return "unknown (\(Self.path) unreadable)" }
        guard !isSufficient else { return "\(datagrams) values per subscription (net.unix.max_dgram_qlen)" }
        return "\(datagrams) values per subscription (net.unix.max_dgram_qlen): bluetoothd drops a notification "
            + "a busy receiver has not read yet once \(datagrams) are waiting; set net.unix.max_dgram_qlen = "
            + "\(Self.recommended) (systemd's default) with sysctl"
    }
}
