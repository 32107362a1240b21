import ArgumentParser
import Roles

/// The receiver's bounds against peers that trickle or fill the disk; shared by `receive`
/// and `daemon --role receiver`, so both parse and document them the same way;
/// `ReceiverOptions` checks and maps them.
struct ReceiverBoundOptions: ParsableArguments {
    @Option(name: .customLong("min-rate"), help: ArgumentHelp(
        "Drop a transfer slower than this many bytes per second, counted from the subscription after the first 20 s "
            + "(default \(CentralConfiguration.defaultMinimumRate); 0: no floor).",
        valueName: "BYTES/S"))
    var minimumRate: Int?

    @Option(name: .long, help: ArgumentHelp(
        "Directory output: refuse a message unless this many bytes stay free after it (default 64 MiB; 0: none).",
        valueName: "BYTES"))
    var reserve: Int?

    @Option(name: .customLong("quota-bytes"), help: ArgumentHelp(
        "Directory output: refuse a message that would bring the directory's messages over this many bytes (default: no quota).",
        valueName: "BYTES"))
    var quotaBytes: Int?

    @Option(name: .customLong("quota-files"), help: ArgumentHelp(
        "Directory output: refuse a message once the directory holds this many (default: no quota).", valueName: "N"))
    var quotaFiles: Int?

    var isStorageSet: Bool { reserve != nil || quotaBytes != nil || quotaFiles != nil }

    /// The receiver's options: these, and what the command takes besides (adapter and UUIDs
    /// come from `CommonRoleOptions.targeting(_:secureMode:)`).
    func receiverOptions(minimumRSSI: Int?, maximumSize: Int?, idleTimeout: Double?, compat: Bool) -> ReceiverOptions {
        var options = ReceiverOptions()
        options.minimumRSSI = minimumRSSI
        options.maximumSize = maximumSize
        options.idleTimeout = idleTimeout
        options.requestFramed = !compat
        options.minimumRate = minimumRate
        options.reserve = reserve
        options.quotaBytes = quotaBytes
        options.quotaFiles = quotaFiles
        return options
    }
}
