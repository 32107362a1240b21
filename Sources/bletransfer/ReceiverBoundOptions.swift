import ArgumentParser
import Roles

/// The receiver's bounds against peers that trickle or fill the disk; shared by `receive`
/// and `daemon --role receiver`.
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

    var isAnySet: Bool { minimumRate != nil || reserve != nil || quotaBytes != nil || quotaFiles != nil }
    var isStorageSet: Bool { reserve != nil || quotaBytes != nil || quotaFiles != nil }

    mutating func validate() throws {
        if let minimumRate {
            _ = try OptionValidation.count(minimumRate, option: "--min-rate", minimum: 0)
        }
        if let reserve {
            _ = try OptionValidation.byteCount(reserve, option: "--reserve", minimum: 0, maximum: 1 << 50)
        }
        if let quotaBytes {
            _ = try OptionValidation.byteCount(quotaBytes, option: "--quota-bytes", maximum: 1 << 50)
        }
        if let quotaFiles {
            _ = try OptionValidation.count(quotaFiles, option: "--quota-files")
        }
    }

    var storageLimits: StorageLimits {
        StorageLimits(reserveBytes: reserve ?? StorageLimits.defaultReserveBytes, quotaBytes: quotaBytes, quotaFiles: quotaFiles)
    }
}
