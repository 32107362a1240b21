import Foundation
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
}
