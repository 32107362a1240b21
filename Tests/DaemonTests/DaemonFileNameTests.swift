@testable import Daemon
import DaemonSupport
import Foundation
@testable import Machines
import Roles
@testable import Storage
import SystemPackage
import Testing
import Transfer
import Trust

/// File names in the daemons: the outbox file's name goes out with it, the inbox keeps it
/// (sanitized, never overwriting), and events and log lines carry it safely.
@Suite struct DaemonFileNameTests {
    static func temporaryDirectory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-names-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test("an outbox file is offered with its name and exact modification time")
    func outboxFileCarriesItsName() async throws {
        let url = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let path = url.appendingPathComponent("photo.jpg").path
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: path))
        var times = [timespec(tv_sec: 0, tv_nsec: 0), timespec(tv_sec: 1_600_000_000, tv_nsec: 987_654_321)]
        #expect(utimensat(AT_FDCWD, path, &times, 0) == 0)
        let source = try OutboxMessageSource(directory: FilePath(url.path), maximumFileSize: 1000, settleTime: .zero)
        let message = try #require(await source.current())
        #expect(message.file == SentFileAttributes(name: "photo.jpg", modificationSeconds: 1_600_000_000,
                                                   modificationNanoseconds: 987_654_321))
    }

    @Test("the inbox stores a named message under its sanitized name, a second one numbered, unnamed ones generated")
    func inboxKeepsNames() async throws {
        let url = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let fixed = Date(timeIntervalSince1970: 1_738_324_805.042)
        let sink = InboxSink(directory: try OutputDirectory(path: FilePath(url.path)), now: { fixed })
        var named = ReceivedMessage(payload: Array("one".utf8), format: .secure)
        named.file = SentFileAttributes(name: "-report.pdf", modificationSeconds: 1_600_000_000, modificationNanoseconds: 0)
        _ = try await sink.store(named, sequence: 1, from: nil)
        named.payload = Array("two".utf8)
        _ = try await sink.store(named, sequence: 2, from: nil)
        _ = try await sink.store(ReceivedMessage(payload: Array("three".utf8), format: .secure), sequence: 3, from: nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: url.path).sorted()
            == ["_report-1.pdf", "_report.pdf", "message-20250131-120005.042-0003.txt"])
        #expect(try Data(contentsOf: url.appendingPathComponent("_report.pdf")) == Data("one".utf8))
        #expect(try Data(contentsOf: url.appendingPathComponent("_report-1.pdf")) == Data("two".utf8))
    }

    @Test("--folder-per-sender: each authenticated sender's files in a folder of its name (or fingerprint), others at the top")
    func foldersPerSender() async throws {
        let url = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: url) }
        let fixed = Date(timeIntervalSince1970: 1_738_324_805.042)
        let sink = InboxSink(directory: try OutputDirectory(path: FilePath(url.path)), folderPerSender: true, now: { fixed })
        let laptop = HostIdentity(name: "unused")
        var fromLaptop = ReceivedMessage(payload: Array("one".utf8), format: .secure)
        fromLaptop.authenticatedSender = laptop.publicKey.line(name: "../laptop")
        fromLaptop.file = SentFileAttributes(name: "docs/a.txt", modificationSeconds: 1_600_000_000, modificationNanoseconds: 0)
        let first = try #require(try await sink.store(fromLaptop, sequence: 1, from: nil))
        #expect(first == url.path + "/_laptop/docs/a.txt")

        var unnamed = ReceivedMessage(payload: Array("two".utf8), format: .secure)
        unnamed.authenticatedSender = laptop.publicKey.line(name: nil)
        let second = try #require(try await sink.store(unnamed, sequence: 2, from: nil))
        let folder = try #require(OutputDirectory.sanitizedFileName(laptop.publicKey.fingerprint))
        #expect(second.hasPrefix(url.path + "/" + folder + "/message-"))

        let third = try #require(try await sink.store(ReceivedMessage(payload: Array("three".utf8), format: .compat),
                                                      sequence: 3, from: nil))
        #expect(FilePath(third).removingLastComponent().string == url.path)
    }

    @Test("the received event carries the name as sent in JSON, escaped in the sentence and the log")
    func eventsCarryTheName() throws {
        let hostile = "photo\u{1B}[2J\u{202E}.jpg"
        let summary = MessageSummary(sequence: 1, byteCount: 3, format: .secure, fileName: hostile)
        let event = RoleEvent.received(summary, from: nil, storedAt: "/in/photo_[2J_.jpg")
        let line = EventRenderer.jsonLine(for: event)
        #expect(!line.unicodeScalars.contains { SafeText.needsEscape($0) })
        let decoded = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        #expect(decoded?["name"] as? String == hostile)
        #expect(decoded?["path"] as? String == "/in/photo_[2J_.jpg")
        let sentence = EventRenderer.sentence(for: event)
        #expect(sentence.contains("named \"photo\\x1b[2J\\u{202e}.jpg\""))
        #expect(!sentence.unicodeScalars.contains { SafeText.needsEscape($0) })
        #expect(DaemonReporter.metadata(summary)["name"] == "photo\\x1b[2J\\u{202e}.jpg")
        // Without a name, nothing is added.
        let plain = MessageSummary(sequence: 1, byteCount: 3, format: .secure)
        #expect(try EventRenderer.decodedJSON(for: .received(plain, from: nil, storedAt: nil))["name"] == nil)
        #expect(DaemonReporter.metadata(plain)["name"] == nil)
    }
}
