#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging
import Synchronization
import SystemPackage

/// Where finished log lines go. `standardError` writes each line with a single `write(2)`
/// under a process-wide lock, so lines from concurrent tasks never interleave.
package struct LogLineWriter: Sendable {
    /// Receives each line without its trailing newline.
    package let write: @Sendable (String) -> Void

    package init(_ write: @escaping @Sendable (String) -> Void) { self.write = write }

    package static let standardError = LogLineWriter { line in
        FileDescriptorLineWriter.standardError.write(line)
    }
}

/// Serialises whole-line writes to one descriptor.
final class FileDescriptorLineWriter: Sendable {
    static let standardError = FileDescriptorLineWriter(fd: STDERR_FILENO)

    private let fd: Int32
    /// Guards nothing but the ordering of writes to `fd`: one line at a time.
    private let writing = Mutex(())

    init(fd: Int32) { self.fd = fd }

    func write(_ line: String) {
        var bytes = Array(line.utf8)
        bytes.append(UInt8(ascii: "\n"))
        writing.withLock { _ in
            // Nowhere is left to report a failing log stream: its error is dropped.
            _ = try? FileDescriptor(rawValue: fd).writeAll(bytes)
        }
    }
}

/// A swift-log handler for daemon mode: one line per record on standard error, with the journal's priority prefix
/// when standard error is the journal (see `JournalStream`) and a plain `LEVEL message key=value` line otherwise.
package struct DaemonLogHandler: LogHandler {
    package let label: String
    package let format: LogLineFormat
    package var logLevel: Logger.Level
    package var metadata: Logger.Metadata
    package var metadataProvider: Logger.MetadataProvider?
    private let writer: LogLineWriter

    package init(
        label: String, format: LogLineFormat, logLevel: Logger.Level = .info, metadata: Logger.Metadata = [:],
        metadataProvider: Logger.MetadataProvider? = nil, writer: LogLineWriter = .standardError
    ) {
        self.label = label
        self.format = format
        self.logLevel = logLevel
        self.metadata = metadata
        self.metadataProvider = metadataProvider
        self.writer = writer
    }

    /// The handler for standard error, in the form its destination understands.
    package static func standardError(label: String, logLevel: Logger.Level = .info) -> DaemonLogHandler {
        DaemonLogHandler(
            label: label, format: JournalStream.isStandardErrorJournal ? .journal : .plain, logLevel: logLevel)
    }

    /// Installs this handler for every logger; swift-log allows it once per process: first thing in the daemon command.
    package static func bootstrap(logLevel: Logger.Level = .info) {
        LoggingSystem.bootstrap { standardError(label: $0, logLevel: logLevel) }
    }

    package subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    package func log(event: LogEvent) {
        // Later sources win: handler metadata, then the provider's, then the record's own.
        var merged = metadata
        if let provided = metadataProvider?.get() {
            merged.merge(provided) { _, new in new }
        }
        if let own = event.metadata {
            merged.merge(own) { _, new in new }
        }
        if let error = event.error, merged["error"] == nil { merged["error"] = .string(String(describing: error)) }
        writer.write(
            LogLineFormatter.line(format: format, level: event.level, message: event.message.description, metadata: merged))
    }
}
