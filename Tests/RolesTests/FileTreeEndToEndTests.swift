import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import SystemCalls
import SystemPackage
import Testing
import Transfer
import TestSupport
import Trust

/// `send --file DIR` → `receive --output-dir`: a tree, its files read one at a time, goes in one
/// session and is laid out again under the receiver's directory, which a hostile name cannot
/// leave.
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(3)))
struct FileTreeEndToEndTests {
    private func scratch(_ label: String) throws -> String {
        let directory = NSTemporaryDirectory() + "tree-\(label)-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory
    }

    /// A fresh source directory and inbox for `body`, removed after it.
    private func withSourceAndInbox(_ label: String, _ body: (_ source: String, _ inbox: String) async throws -> Void)
        async throws {
        let source = try scratch(label + "-source")
        let inbox = try scratch(label + "-inbox")
        defer {
            try? FileManager.default.removeItem(atPath: source)
            try? FileManager.default.removeItem(atPath: inbox)
        }
        try await body(source, inbox)
    }

    private func write(_ text: String, to path: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
    }

    @Test("a directory's tree and a file beside it arrive in one session, laid out as sent; the receiver then stops")
    func aTreeArrivesLaidOutAsSent() async throws {
        try await withSourceAndInbox("tree") { source, inbox in
            try write("top\n", to: source + "/docs/readme.txt")
            try write("deep\n", to: source + "/docs/notes/2024/plan.md")
            try write("", to: source + "/docs/empty.txt")
            try write("alone\n", to: source + "/single.bin")
            try FileManager.default.createSymbolicLink(atPath: source + "/docs/link", withDestinationPath: "/etc/passwd")

            let set = try FileSet.collect([source + "/docs", source + "/single.bin"], limit: 1 << 20)
            #expect(set.entries.map(\.name) == ["docs/empty.txt", "docs/notes/2024/plan.md", "docs/readme.txt", "single.bin"])
            #expect(set.notes.count == 1 && set.notes[0].contains("symbolic link"))

            let files = FileSetSource(set: set, limit: 1 << 20)
            let exchange = try await FileSetExchange.run(files, into: inbox, timeout: .seconds(90))
            #expect(exchange.received == 4)
            #expect(exchange.sent == 4)
            #expect(await files.deliveredCount == 4)
            #expect(await files.problems.isEmpty)

            #expect(try String(contentsOfFile: inbox + "/docs/readme.txt", encoding: .utf8) == "top\n")
            #expect(try String(contentsOfFile: inbox + "/docs/notes/2024/plan.md", encoding: .utf8) == "deep\n")
            #expect(try Data(contentsOf: URL(fileURLWithPath: inbox + "/docs/empty.txt")).isEmpty)
            #expect(try String(contentsOfFile: inbox + "/single.bin", encoding: .utf8) == "alone\n")
            #expect(!FileManager.default.fileExists(atPath: inbox + "/docs/link"))
            let visits = exchange.receiverEvents.filter { if case .subscribed = $0 { true } else { false } }
            #expect(visits.count == 1)
        }
    }
}

extension FileTreeEndToEndTests {
    @Test("a file over the partial-file threshold goes from disk to disk: identical, linked into place, nothing partial left")
    func aLargeFileStreamsFromDiskToDisk() async throws {
        try await withSourceAndInbox("big") { source, inbox in
            let bytes = randomBytes(Int(OutputDirectory.partialFileThreshold) * 3 + 17, seed: 44)
            try Data(bytes).write(to: URL(fileURLWithPath: source + "/large.bin"))
            // The limit bounds what is read into memory; a regular file is read from disk as it goes.
            let set = try FileSet.collect([source + "/large.bin"], limit: 1024)
            let files = FileSetSource(set: set, limit: 1024)
            let message = try #require(await files.nextAvailableNow())
            #expect(message.body.file != nil, "a regular file is sent from disk, not read into memory")

            let exchange = try await FileSetExchange.run(files, into: inbox, timeout: .seconds(120))
            #expect(exchange.received == 1)
            #expect(exchange.sent == 1)
            #expect(try Array(Data(contentsOf: URL(fileURLWithPath: inbox + "/large.bin"))) == bytes)
            let left = try FileManager.default.contentsOfDirectory(atPath: inbox)
            #expect(left == ["large.bin"], "nothing partial stays: \(left)")
        }
    }
}

/// Where a received relative path lands: always inside the output directory, whatever the
/// sender wrote and whatever the directory already holds.
@Suite struct ReceivedPathTests {
    private func withDirectory(_ body: (OutputDirectory, String) async throws -> Void) async throws {
        let path = NSTemporaryDirectory() + "paths-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await body(try OutputDirectory(path: FilePath(path)), path)
    }

    @Test(arguments: [
        ("../../etc/passwd", "etc/passwd"), ("/abs/x", "abs/x"), ("a/./b/../c", "a/b/c"), ("a//b", "a/b"),
        ("..hidden/.x", "hidden/x"), ("-rf/\u{202E}txt.exe", "_rf/_txt.exe"), ("docs/", "docs"),
    ])
    func hostileComponentsAreMadeSafe(sent: String, stored: String) async throws {
        try await withDirectory { directory, path in
            let final = try await directory.store(Array("x".utf8), baseName: sent)
            #expect(final.string == path + "/" + stored)
            #expect(FileManager.default.fileExists(atPath: path + "/" + stored))
        }
    }

    @Test func aSymbolicLinkOrAFileInTheWayIsNeverFollowedOrReplaced() async throws {
        try await withDirectory { directory, path in
            let outside = NSTemporaryDirectory() + "outside-" + UUID().uuidString
            try FileManager.default.createDirectory(atPath: outside, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: outside) }
            // Planted in the inbox: a link named like the sender's directory, pointing out.
            try FileManager.default.createSymbolicLink(atPath: path + "/docs", withDestinationPath: outside)
            try Data("mine".utf8).write(to: URL(fileURLWithPath: path + "/notes"))

            let first = try await directory.store(Array("a".utf8), baseName: "docs/a.txt")
            #expect(first.string == path + "/docs-1/a.txt")
            #expect(try FileManager.default.contentsOfDirectory(atPath: outside).isEmpty)
            let second = try await directory.store(Array("b".utf8), baseName: "notes/b.txt")
            #expect(second.string == path + "/notes-1/b.txt")
            #expect(try String(contentsOfFile: path + "/notes", encoding: .utf8) == "mine")
            // The same tree again: the same directories, the file numbered, nothing replaced.
            let again = try await directory.store(Array("c".utf8), baseName: "docs/a.txt")
            #expect(again.string == path + "/docs-1/a-1.txt")
        }
    }

    @Test func depthIsBounded() async throws {
        try await withDirectory { directory, path in
            let deep = (0..<40).map { "d\($0)" }.joined(separator: "/") + "/leaf"
            let final = try await directory.store(Array("x".utf8), baseName: deep)
            let relative = String(final.string.dropFirst(path.count + 1))
            #expect(relative.split(separator: "/").count == OutputDirectory.maximumDepth + 1)
            #expect(relative.hasSuffix("/leaf"))
        }
    }
}

/// A message that came into one of the directory's partial files is stored by a link: the
/// stored file is that file, with the sender's time, and the partial name is gone.
@Suite struct PartialFileStorageTests {
    @Test func aPartialFileIsLinkedNotCopied() async throws {
        let path = NSTemporaryDirectory() + "partials-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = try OutputDirectory(path: FilePath(path))
        let store = directory.partialFiles(from: 10)
        #expect(try store.makePartialFile(length: 9) == nil, "below the threshold: memory")
        var file = try #require(try store.makePartialFile(length: 20))
        try file.write(Array("twenty bytes, exact.".utf8), at: 0)
        var partialStatus = stat()
        #expect(fstat(file.descriptor, &partialStatus) == 0)
        let stored = try directory.storeBlocking(MessagePayload(file: file, count: 20), baseName: "kept.txt",
                                                 modificationTime: timespec(tv_sec: 1_600_000_000, tv_nsec: 0))
        var storedStatus = stat()
        #expect(stat(stored.string, &storedStatus) == 0)
        #expect(storedStatus.st_ino == partialStatus.st_ino, "linked, not copied")
        #expect(storedStatus.st_mtim.tv_sec == 1_600_000_000)
        file = try #require(try store.makePartialFile(length: 30))
        _ = file
        file = PayloadFile(descriptor: dup(0), path: "/nonexistent/none")
        #expect(try FileManager.default.contentsOfDirectory(atPath: path) == ["kept.txt"],
                "the partial names went when their files were released")
        #expect(try String(contentsOfFile: stored.string, encoding: .utf8) == "twenty bytes, exact.")
    }
}
