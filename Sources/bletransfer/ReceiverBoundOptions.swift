import ArgumentParser
import Foundation
import Machines
import Options
import Roles
import Storage

/// The receiver's bounds against peers that trickle or fill the disk; shared by `receive` and `daemon --role
/// receiver`, so both parse and document them the same way; `ReceiverOptions` checks and maps them.
struct ReceiverBoundOptions: ParsableArguments {
    @Option(name: .customLong("min-rate"), help: ArgumentHelp(
        "Drop slower transfers after 20s (default \(CentralConfiguration.defaultMinimumRate), 0: off).",
        valueName: "BYTES/S"), transform: bytes)
    var minimumRate: Int?

    @Option(name: .long, help: ArgumentHelp(
        "--output-dir: keep this much disk free (default 64M).", valueName: "BYTES"), transform: bytes)
    var reserve: Int?

    @Option(name: .customLong("quota-bytes"), help: ArgumentHelp(
        "--output-dir: hold at most this many bytes.", valueName: "BYTES"), transform: bytes)
    var quotaBytes: Int?

    @Option(name: .customLong("quota-files"), help: ArgumentHelp(
        "--output-dir: at most this many files and folders.", valueName: "N"))
    var quotaFiles: Int?

    var isStorageSet: Bool { reserve != nil || quotaBytes != nil || quotaFiles != nil }

    /// The receiver's options: these and the rest (adapter, UUIDs: `CommonRoleOptions.targeting(_:secureMode:)`).
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

    /// The spool for `resume`: `--spool-dir`, else `defaultDirectory`. Nil without framing (`--compat`) or when the
    /// default is unusable (a warning says why; messages then start at byte 0). A bad `--spool-dir` is an error.
    func resumeSpool(spool: SpoolOption, framed: Bool, defaultDirectory: String, outputDirectory: String?,
                     warn: (String) -> Void) throws(RoleFailure) -> ResumeSpool? {
        guard framed else { return nil }
        let spoolDirectory = spool.spoolDirectory
        let directory = spoolDirectory ?? defaultDirectory
        if let outputDirectory, Self.isWithin(directory, outputDirectory) {
            // Nothing partial may ever appear in the output directory.
            throw RoleFailure(.usage, "--spool-dir \(directory) is inside the output directory; give a private directory")
        }
        do {
            // Checkpoints stop growing at the same --reserve as stored messages.
            return try ResumeSpool(directory: directory, bounds: .init(reserveBytes: storageLimits.reserveBytes))
        } catch {
            if spoolDirectory != nil { throw RoleFailure(.ioError, "--spool-dir: \(error)") }
            warn("\(error); messages cut midway start again from byte 0 (--spool-dir sets another place)")
            return nil
        }
    }

    /// Whether `path` is `directory` or below it (by absolute, standardized paths).
    static func isWithin(_ path: String, _ directory: String) -> Bool {
        let cwd = FileManager.default.currentDirectoryPath
        func absolute(_ p: String) -> String {
            let full = p.hasPrefix("/") ? p : cwd + "/" + p
            return URL(fileURLWithPath: full).standardizedFileURL.resolvingSymlinksInPath().path
        }
        let inner = absolute(path), outer = absolute(directory)
        return inner == outer || inner.hasPrefix(outer.hasSuffix("/") ? outer : outer + "/")
    }

    var storageLimits: StorageLimits {
        StorageLimits(reserveBytes: reserve ?? StorageLimits.defaultReserveBytes, quotaBytes: quotaBytes, quotaFiles: quotaFiles)
    }
}

/// `--spool-dir` of `receive` and `daemon --role receiver` (advanced).
struct SpoolOption: ParsableArguments {
    @Option(name: .customLong("spool-dir"), help: ArgumentHelp(
        "Keep unfinished messages here, to resume them.", valueName: "DIR"))
    var spoolDirectory: String?

    func validate() throws {
        if spoolDirectory?.isEmpty == true { throw ValidationError("--spool-dir: give a directory path") }
    }
}
