import Transfer

package enum DaemonRoleKind: String, Sendable, CaseIterable {
    /// The central: scans, receives, stores every message in the output directory.
    case receiver
    /// The peripheral: advertises, serves the outbox files one after the other.
    case sender
}

/// What the daemon is doing, for the `STATUS=` line `systemctl status` shows and the log; only the reporter changes it.
struct DaemonStatus: Sendable, Equatable {
    let role: DaemonRoleKind
    /// The adapter named on the command line, nil for BlueZ's first.
    let adapterName: String?
    var state: ManagerState = .unknown
    /// Messages received (receiver) or delivered (sender) since the daemon started.
    var messages = 0
    /// The outbox file being offered now (sender).
    var servingFile: String?
    /// Why the daemon is waiting instead of working (Bluetooth unavailable, access denied).
    var waitingReason: String?
    /// Resident set size at the last update, in bytes.
    var residentBytes: Int?

    /// "receiver on hci0: poweredOn, 12 messages received, RSS 14.2 MiB".
    var line: String {
        var parts = ["\(role.rawValue) on \(adapterName ?? "first adapter"): \(state.rawValue)"]
        switch role {
        case .receiver: parts.append("\(messages) message\(messages == 1 ? "" : "s") received")
        case .sender: parts.append("\(messages) file\(messages == 1 ? "" : "s") sent")
        }
        if role == .sender, waitingReason == nil, state == .poweredOn {
            parts.append(servingFile.map { "offering \($0)" } ?? "outbox empty")
        }
        if let residentBytes { parts.append("RSS " + Self.mebibytes(residentBytes)) }
        var line = parts.joined(separator: ", ")
        if let waitingReason { line += "; waiting: " + waitingReason }
        return line
    }

    static func mebibytes(_ bytes: Int) -> String {
        let tenths = (bytes * 10 + 512 * 1024) / (1024 * 1024)
        return "\(tenths / 10).\(tenths % 10) MiB"
    }
}
