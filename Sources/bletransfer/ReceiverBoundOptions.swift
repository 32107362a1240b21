import ArgumentParser
import Foundation
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

    @Option(name: .customLong("spool-dir"), help: ArgumentHelp(
        "Framed version 2: keep the verified start of an unfinished message here, mode 0700, so that the next visit resumes it "
            + "(default: $XDG_STATE_HOME/bletransfer/spool or ~/.local/state/bletransfer/spool; the daemon: spool in its "
            + "state directory, /var/lib/bletransfer/spool). Never inside the output directory; at most 256 MiB, entries "
            + "removed after 7 days.",
        valueName: "DIR"))
    var spoolDirectory: String?

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

    func validate() throws {
        if spoolDirectory?.isEmpty == true { throw ValidationError("--spool-dir: give a directory path") }
    }

    /// The spool for `resume`: `--spool-dir`, else `defaultDirectory`. Nil without the framed
    /// format (`--compat`: nothing to resume) or when the default cannot be used (a warning says why; the
    /// receiver then starts every message at byte 0). An unusable `--spool-dir` is an error.
    func resumeSpool(framed: Bool, defaultDirectory: String, outputDirectory: String?,
                     warn: (String) -> Void) throws(RoleFailure) -> ResumeSpool? {
        guard framed else { return nil }
        let directory = spoolDirectory ?? defaultDirectory
        if let outputDirectory, Self.isWithin(directory, outputDirectory) {
            // Nothing partial may ever appear in the output directory.
            throw RoleFailure(.usage, "--spool-dir \(directory) is inside the output directory; give a private directory")
        }
        do {
            return try ResumeSpool(directory: directory)
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
