import Foundation
import Glibc
import Logging
import Synchronization
import Testing

@testable import DaemonSupport

/// Collects the lines a handler writes.
final class CapturedLines: Sendable {
    private let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    var writer: LogLineWriter { LogLineWriter { line in self.lines.withLock { $0.append(line) } } }
}

private func logger(
    _ format: LogLineFormat, level: Logger.Level = .trace, capture: CapturedLines,
    metadataProvider: Logger.MetadataProvider? = nil
) -> Logger {
    Logger(label: "test") { label in
        DaemonLogHandler(
            label: label, format: format, logLevel: level, metadataProvider: metadataProvider, writer: capture.writer)
    }
}

struct SampleError: Error, CustomStringConvertible {
    var description: String { "adapter hci0 vanished" }
}

@Suite struct DaemonLogHandlerTests {
    @Test func journalLinesCarryTheSyslogPriority() {
        let capture = CapturedLines()
        let log = logger(.journal, capture: capture)
        log.trace("t")
        log.debug("d")
        log.info("i")
        log.notice("n")
        log.warning("w")
        log.error("e")
        log.critical("c")
        #expect(capture.all == ["<7>t", "<7>d", "<6>i", "<5>n", "<4>w", "<3>e", "<2>c"])
    }

    @Test func plainLinesStartWithTheLevel() {
        let capture = CapturedLines()
        let log = logger(.plain, capture: capture)
        log.warning("adapter gone", metadata: ["adapter": "hci0"])
        log.info("message received", metadata: ["bytes": "1024", "from": "AA:BB:CC:DD:EE:FF"])
        #expect(capture.all == [
            "WARNING adapter gone adapter=hci0",
            "INFO message received bytes=1024 from=AA:BB:CC:DD:EE:FF",
        ])
    }

    @Test func metadataIsSortedAndQuotedDeterministically() {
        let capture = CapturedLines()
        let log = logger(.journal, capture: capture)
        log.info("m", metadata: [
            "zeta": "plain",
            "alpha": "two words",
            "quote": "say \"hi\"",
            "list": ["a", "b c"],
            "dict": ["y": "2", "x": "1"],
            "empty": "",
            "eq": "a=b",
            "count": .stringConvertible(42),
        ])
        #expect(capture.all == [
            #"<6>m alpha="two words" count=42 dict={x=1,y=2} empty="" eq="a=b" list=[a,"b c"] quote="say \"hi\"" zeta=plain"#
        ])
    }

    @Test func oneRecordIsOneLine() {
        let capture = CapturedLines()
        let log = logger(.plain, capture: capture)
        log.error("first\nsecond\tthird\u{1}", metadata: ["detail": "line1\nline2"])
        #expect(capture.all == [#"ERROR first\nsecond\tthird\x01 detail="line1\nline2""#])
    }

    @Test func peerTextCannotDriveATerminalOrReorderALine() {
        let capture = CapturedLines()
        let log = logger(.journal, capture: capture)
        let name = "ev\u{1B}[31mIL\u{9B}2J\u{202E}gpj.exe"
        log.warning("refused \(name)", metadata: ["peerName": "\(name)", "plain": "\(name.filter(\.isLetter))"])
        let line = capture.all.first ?? ""
        #expect(!line.unicodeScalars.contains { SafeText.needsEscape($0) })
        #expect(line.contains(#"refused ev\x1b[31mIL\x9b2J\u{202e}gpj.exe"#))
        #expect(line.contains(#"peerName="ev\x1b[31mIL\x9b2J\u{202e}gpj.exe""#))
    }

    @Test func recordMetadataWinsOverProviderAndHandlerMetadata() {
        let capture = CapturedLines()
        let provider = Logger.MetadataProvider { ["role": "provider", "run": "7"] }
        var log = logger(.plain, capture: capture, metadataProvider: provider)
        log[metadataKey: "role"] = "receiver"
        log[metadataKey: "adapter"] = "hci0"
        log.info("ready")
        log.info("ready", metadata: ["adapter": "hci1"])
        #expect(capture.all == [
            "INFO ready adapter=hci0 role=provider run=7",
            "INFO ready adapter=hci1 role=provider run=7",
        ])
    }

    @Test func errorsAreRenderedAsMetadata() {
        let capture = CapturedLines()
        let handler = DaemonLogHandler(label: "t", format: .journal, writer: capture.writer)
        handler.log(event: LogEvent(
            level: .error, message: "adapter lost", error: SampleError(), metadata: nil, source: nil,
            file: #fileID, function: #function, line: #line))
        #expect(capture.all == [#"<3>adapter lost error="adapter hci0 vanished""#])
    }

    @Test func levelBelowTheHandlersIsDropped() {
        let capture = CapturedLines()
        let log = logger(.plain, level: .notice, capture: capture)
        log.info("hidden")
        log.notice("shown")
        #expect(capture.all == ["NOTICE shown"])
    }

    @Test func fileDescriptorWriterWritesWholeLines() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let writer = FileDescriptorLineWriter(fd: fds[1])
        writer.write("<6>first")
        writer.write("second")
        close(fds[1])
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = read(fds[0], &buffer, buffer.count)
            if count <= 0 { break }
            bytes += buffer[..<count]
        }
        #expect(String(decoding: bytes, as: UTF8.self) == "<6>first\nsecond\n")
    }
}

@Suite struct JournalStreamTests {
    @Test func matchesTheDeviceAndInodeOfTheDescriptor() throws {
        let path = try makeTemporaryDirectory() + "/stream"
        #expect(FileManager.default.createFile(atPath: path, contents: nil))
        let fd = open(path, O_RDONLY)
        #expect(fd >= 0)
        defer { close(fd) }
        var status = stat()
        #expect(fstat(fd, &status) == 0)
        let matching = "\(status.st_dev):\(status.st_ino)"
        #expect(JournalStream.isJournal(fd: fd, environmentValue: matching))
        #expect(!JournalStream.isJournal(fd: fd, environmentValue: "\(status.st_dev):\(status.st_ino + 1)"))
        #expect(!JournalStream.isJournal(fd: fd, environmentValue: "\(status.st_dev + 1):\(status.st_ino)"))
        #expect(!JournalStream.isJournal(fd: fd, environmentValue: nil))
        #expect(!JournalStream.isJournal(fd: fd, environmentValue: ""))
        #expect(!JournalStream.isJournal(fd: fd, environmentValue: "\(status.st_dev):\(status.st_ino):1"))
        #expect(!JournalStream.isJournal(fd: -1, environmentValue: matching))
    }
}
