import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Machines
@testable import Storage
import Testing
import Transfer

/// `send --file` with several files: the order the files go in, and what the pipeline prepares
/// ahead while a message awaits its ACK.
@Suite(.timeLimit(.minutes(1)))
struct FileSetSourceTests {
    @Test("the file after the upcoming one is read while the current one awaits its ACK, and comes next as read")
    func preparedAheadComesNextAsRead() async throws {
        let directory = NSTemporaryDirectory() + "fileset-ahead-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for name in ["1.txt", "2.txt", "3.txt", "4.txt"] {
            try Data(name.utf8).write(to: URL(fileURLWithPath: directory + "/" + name))
        }
        let source = FileSetSource(set: try FileSet.collect([directory], limit: 1024), limit: 1024)
        let first = try #require(await source.current())
        let upcoming = try #require(await source.upcomingNow(skipping: 0))
        // With the window full, the file after the one sent ahead is prepared.
        _ = await source.upcomingNow(skipping: 1)
        // Removed once read: what was prepared is what goes, and nothing is read past it.
        try FileManager.default.removeItem(atPath: directory + "/3.txt")
        try FileManager.default.removeItem(atPath: directory + "/4.txt")
        await source.markDelivered(first, summary: MessageSummary(sequence: 1, byteCount: 5, format: .secure), to: nil)
        #expect(await source.nextAvailableNow() == upcoming)
        let third = try #require(await source.upcomingNow(skipping: 0))
        #expect(try third.body.bytes(in: 0..<third.body.count) == Array("3.txt".utf8))
        #expect(third.file?.name.hasSuffix("3.txt") == true)
        #expect(await source.problems.isEmpty)
    }

    /// L-5: what `send -f DIR` listed is what it sends. A file swapped since the walk for a
    /// symbolic link (to a secret), a FIFO, another file, or a directory of its path swapped for
    /// a link, is refused when its turn comes: not followed, not waited on, not sent.
    @Test("a tree's file swapped after the walk for a link, a FIFO or another file is refused, not followed or waited on")
    func swappedFilesAreRefused() async throws {
        let base = NSTemporaryDirectory() + "fileset-swap-" + UUID().uuidString
        let tree = base + "/docs"
        try FileManager.default.createDirectory(atPath: tree + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: base + "/secret/sub", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        for name in ["a-link.txt", "b-fifo.txt", "c-other.txt", "d-kept.txt", "sub/e-deep.txt"] {
            try Data("listed \(name)".utf8).write(to: URL(fileURLWithPath: tree + "/" + name))
        }
        try Data("SECRET".utf8).write(to: URL(fileURLWithPath: base + "/secret/key"))
        try Data("SECRET".utf8).write(to: URL(fileURLWithPath: base + "/secret/sub/e-deep.txt"))
        let set = try FileSet.collect([tree], limit: 1 << 20)
        #expect(set.entries.map(\.name) == ["docs/a-link.txt", "docs/b-fifo.txt", "docs/c-other.txt", "docs/d-kept.txt",
                                           "docs/sub/e-deep.txt"])

        // Swapped after the walk.
        try FileManager.default.removeItem(atPath: tree + "/a-link.txt")
        #expect(symlink(base + "/secret/key", tree + "/a-link.txt") == 0)
        try FileManager.default.removeItem(atPath: tree + "/b-fifo.txt")
        #expect(mkfifo(tree + "/b-fifo.txt", 0o644) == 0)
        // Renamed over: a new inode while the listed one still exists. (A file removed first may
        // give its inode number to the next file made, which is then that writer's own content.)
        try Data("SECRET".utf8).write(to: URL(fileURLWithPath: base + "/other"))
        #expect(rename(base + "/other", tree + "/c-other.txt") == 0)
        #expect(rename(tree + "/sub", base + "/old-sub") == 0)
        #expect(symlink(base + "/secret/sub", tree + "/sub") == 0)

        let source = FileSetSource(set: set, limit: 1 << 20)
        let started = ContinuousClock.now
        var sent: [(String, [UInt8])] = []
        while let message = await source.current() {
            sent.append((message.file?.name ?? "", message.payload))
            await source.markDelivered(message, summary: MessageSummary(sequence: sent.count, byteCount: message.byteCount,
                                                                        format: .secure), to: nil)
        }
        #expect(ContinuousClock.now - started < .seconds(10), "a FIFO swapped in must not be waited on")
        #expect(sent.map(\.0) == ["docs/d-kept.txt"])
        #expect(sent.allSatisfy { !String(decoding: $0.1, as: UTF8.self).contains("SECRET") })
        let problems = await source.problems
        #expect(problems.count == 4, "\(problems)")
        #expect(problems.contains { $0.contains("a-link.txt") && $0.contains("symbolic link") })
        #expect(problems.contains { $0.contains("b-fifo.txt") && $0.contains("no longer a regular file") })
        #expect(problems.contains { $0.contains("c-other.txt") && $0.contains("replaced by another file") })
        #expect(problems.contains { $0.contains("e-deep.txt") && $0.contains("symbolic link") })
    }
}
