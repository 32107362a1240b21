import Foundation
import Glibc
import Synchronization
import SystemPackage
import Testing

@testable import DaemonSupport

/// A temporary outbox directory and helpers to drop files into it.
final class OutboxFixture {
    let directory: String

    init() throws { directory = try makeTemporaryDirectory() }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    /// Writes `contents` as `name`, with a modification time `secondsAgo` in the past; the
    /// write goes to a dot-file first and is renamed in, as users are told to do.
    @discardableResult
    func drop(_ name: String, _ contents: String, secondsAgo: Int = 0) throws -> String {
        try drop(name, bytes: Array(contents.utf8), secondsAgo: secondsAgo)
    }

    @discardableResult
    func drop(_ name: String, bytes: [UInt8], secondsAgo: Int = 0) throws -> String {
        let temporary = directory + "/.incoming-" + name
        try Data(bytes).write(to: URL(fileURLWithPath: temporary))
        if secondsAgo > 0 {
            try setModificationTime(temporary, secondsAgo: secondsAgo)
        }
        let final = directory + "/" + name
        #expect(rename(temporary, final) == 0)
        return final
    }

    func setModificationTime(_ path: String, secondsAgo: Int) throws {
        let date = Date(timeIntervalSinceNow: -Double(secondsAgo))
        try FileManager.default.setAttributes([.modificationDate: date], ofItemAtPath: path)
    }

    func names(in subdirectory: String? = nil) throws -> [String] {
        let path = subdirectory.map { directory + "/" + $0 } ?? directory
        return try FileManager.default.contentsOfDirectory(atPath: path).sorted()
    }

    /// Regular files left in the outbox itself.
    func waitingFiles() throws -> [String] {
        try names().filter { name in
            var status = stat()
            return lstat(directory + "/" + name, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
        }
    }

    func contents(_ relativePath: String) throws -> String {
        try String(contentsOfFile: directory + "/" + relativePath, encoding: .utf8)
    }

    func outbox(
        maxFileSize: Int = 1 << 20, settleTime: Duration = .zero, rescanInterval: Duration? = .seconds(3600),
        report: @escaping @Sendable (OutboxNotice) -> Void = { _ in }
    ) throws -> Outbox {
        try Outbox(
            directory: FilePath(directory), maxFileSize: maxFileSize, settleTime: settleTime,
            rescanInterval: rescanInterval, report: report)
    }
}

/// Waits for an unstructured task and cancels it when the waiting test is cancelled (for
/// example by its time limit), so a failing test ends instead of hanging the run.
func valueCancellingOnExit<Value: Sendable>(_ task: Task<Value, any Error>) async throws -> Value {
    try await withTaskCancellationHandler { try await task.value } onCancel: { task.cancel() }
}

final class Notices: Sendable {
    private let notices = Mutex<[OutboxNotice]>([])
    var all: [OutboxNotice] { notices.withLock { $0 } }
    var report: @Sendable (OutboxNotice) -> Void { { notice in self.notices.withLock { $0.append(notice) } } }
}

@Suite struct OutboxTests {
    @Test func createsItsSubdirectories() throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox()
        #expect(try fixture.names() == ["failed", "sent"])
        #expect(outbox.watchesChanges)
    }

    @Test func refusesAFileWhereTheDirectoryShouldBe() throws {
        let fixture = try OutboxFixture()
        let path = try fixture.drop("not-a-dir", "x")
        #expect(throws: OutboxError.notADirectory(path)) {
            _ = try Outbox(directory: FilePath(path), maxFileSize: 10)
        }
    }

    @Test func servesOldestModificationTimeFirstThenByName() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("c-newest", "3", secondsAgo: 10)
        try fixture.drop("b-tie", "2", secondsAgo: 100)
        try fixture.drop("a-tie", "1", secondsAgo: 100)
        try fixture.drop("z-oldest", "0", secondsAgo: 1000)
        // Give the two "tie" files the very same time stamp.
        var status = stat()
        #expect(stat(fixture.directory + "/a-tie", &status) == 0)
        var times = [status.st_atim, status.st_mtim]
        #expect(utimensat(AT_FDCWD, fixture.directory + "/b-tie", &times, 0) == 0)

        let outbox = try fixture.outbox()
        #expect(try await outbox.pendingFileNames() == ["z-oldest", "a-tie", "b-tie", "c-newest"])
        var served: [String] = []
        while let file = try await outbox.next() {
            served.append(String(decoding: file.bytes, as: UTF8.self))
            try await outbox.markDelivered(file)
        }
        #expect(served == ["0", "1", "2", "3"])
        #expect(try fixture.waitingFiles() == [])
        #expect(try fixture.names(in: "sent") == ["a-tie", "b-tie", "c-newest", "z-oldest"])
    }

    @Test func ignoresHiddenPartialAndNonRegularEntries() async throws {
        let fixture = try OutboxFixture()
        let dir = fixture.directory
        try fixture.drop("real.txt", "payload", secondsAgo: 5)
        for name in [".hidden", "upload.part", "x.partial", "y.tmp", "z.temp", "doc.swp", "f.crdownload", "g.filepart", "backup~"] {
            try Data("skip".utf8).write(to: URL(fileURLWithPath: dir + "/" + name))
            try fixture.setModificationTime(dir + "/" + name, secondsAgo: 50)
        }
        try FileManager.default.createDirectory(atPath: dir + "/subdir", withIntermediateDirectories: false)
        #expect(symlink(dir + "/real.txt", dir + "/link-to-real") == 0)
        #expect(symlink("/etc/passwd", dir + "/link-to-passwd") == 0)
        #expect(mkfifo(dir + "/pipe", 0o644) == 0)

        let outbox = try fixture.outbox()
        #expect(try await outbox.pendingFileNames() == ["real.txt"])
        let file = try #require(try await outbox.next())
        #expect(file.name == "real.txt")
        #expect(file.bytes == Array("payload".utf8))
        try await outbox.markDelivered(file)
        #expect(try await outbox.next() == nil)
    }

    @Test func sameFileUntilDeliveredAndSentNamesNeverOverwrite() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("note.txt", "second", secondsAgo: 5)
        try FileManager.default.createDirectory(atPath: fixture.directory + "/sent", withIntermediateDirectories: true)
        try Data("first".utf8).write(to: URL(fileURLWithPath: fixture.directory + "/sent/note.txt"))

        let outbox = try fixture.outbox()
        let file = try #require(try await outbox.next())
        #expect(try await outbox.next() == file)  // not delivered yet: served again
        let moved = try await outbox.markDelivered(file)
        #expect(moved == FilePath(fixture.directory + "/sent/note-1.txt"))
        #expect(try fixture.contents("sent/note.txt") == "first")
        #expect(try fixture.contents("sent/note-1.txt") == "second")
        #expect(try await outbox.next() == nil)
        // Marking it again finds nothing to move.
        #expect(try await outbox.markDelivered(file) == nil)
    }

    @Test func quarantinesOversizeAndEmptyFilesWithAReason() async throws {
        let fixture = try OutboxFixture()
        let notices = Notices()
        try fixture.drop("big.bin", bytes: [UInt8](repeating: 7, count: 101), secondsAgo: 30)
        try fixture.drop("empty", "", secondsAgo: 20)
        try fixture.drop("fits.bin", bytes: [UInt8](repeating: 1, count: 100), secondsAgo: 10)

        let outbox = try fixture.outbox(maxFileSize: 100, report: notices.report)
        let file = try #require(try await outbox.next())
        #expect(file.name == "fits.bin")
        #expect(file.size == 100)
        #expect(try fixture.names(in: "failed") == ["big.bin", "big.bin.reason", "empty", "empty.reason"])
        #expect(try fixture.contents("failed/big.bin.reason") == "101 bytes is over the limit of 100 bytes\n")
        #expect(try fixture.contents("failed/empty.reason").contains("empty"))
        #expect(notices.all == [
            .quarantined(
                name: "big.bin", reason: "101 bytes is over the limit of 100 bytes",
                movedTo: FilePath(fixture.directory + "/failed/big.bin")),
            .quarantined(
                name: "empty", reason: "the file is empty, and an empty message cannot be sent",
                movedTo: FilePath(fixture.directory + "/failed/empty")),
        ])
        // A second bad file of the same name does not replace the first one in failed/. (A
        // drain reuses its listing until the watcher reports the arrival: wait for that.)
        let seen = outbox.changeGeneration
        try fixture.drop("big.bin", bytes: [UInt8](repeating: 8, count: 200), secondsAgo: 40)
        await outbox.waitForChange(after: seen, timeout: .seconds(30))
        #expect(try await outbox.next()?.name == "fits.bin")
        #expect(try fixture.names(in: "failed").contains("big-1.bin"))
        #expect(try fixture.names(in: "failed").contains("big-1.bin.reason"))
    }

    @Test func quarantinesAHardLinkedFile() async throws {
        let fixture = try OutboxFixture()
        let elsewhere = NSTemporaryDirectory() + "outside-" + UUID().uuidString
        try Data("private key".utf8).write(to: URL(fileURLWithPath: elsewhere))
        defer { unlink(elsewhere) }
        #expect(link(elsewhere, fixture.directory + "/linked") == 0)
        try fixture.setModificationTime(fixture.directory + "/linked", secondsAgo: 10)
        try fixture.drop("copied", "y", secondsAgo: 5)
        let outbox = try fixture.outbox()
        #expect(try await outbox.next()?.name == "copied")
        #expect(try fixture.names(in: "failed") == ["linked", "linked.reason"])
        #expect(try fixture.contents("failed/linked.reason").contains("2 hard links"))
    }

    @Test(.enabled(if: geteuid() != 0, "root reads any file"))
    func quarantinesUnreadableFiles() async throws {
        let fixture = try OutboxFixture()
        let path = try fixture.drop("secret", "x", secondsAgo: 10)
        #expect(chmod(path, 0) == 0)
        try fixture.drop("ok", "y", secondsAgo: 5)
        let outbox = try fixture.outbox()
        #expect(try await outbox.next()?.name == "ok")
        #expect(try fixture.names(in: "failed") == ["secret", "secret.reason"])
    }

    @Test func waitsForAFileToSettle() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("fresh", "x")
        let now = FileTime.now()
        let later = Mutex(now)
        let outbox = try Outbox(
            directory: FilePath(fixture.directory), maxFileSize: 100, settleTime: .seconds(60),
            rescanInterval: .seconds(3600), report: { _ in }, clock: { later.withLock { $0 } })
        #expect(try await outbox.next() == nil)
        #expect(try await outbox.pendingFileNames() == ["fresh"])
        later.withLock { $0 = now + .seconds(61) }
        #expect(try await outbox.next()?.name == "fresh")
    }

    @Test(.timeLimit(.minutes(1)))
    func waitForFileWakesWhenAFileSettles() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox(settleTime: .milliseconds(200), rescanInterval: .seconds(3600))
        try fixture.drop("soon", "x")
        let file = try await outbox.waitForFile()
        #expect(file.name == "soon")
    }

    /// Moved in the Maildir way: complete, offered at once however long the settle time.
    @Test(.timeLimit(.minutes(1)))
    func aFileMovedInGoesAtOnce() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox(settleTime: .seconds(3600), rescanInterval: .seconds(3600))
        #expect(outbox.watchesChanges)
        let waiter = Task { try await outbox.waitForFile() }
        try fixture.drop("moved-in", "complete")
        #expect(try await valueCancellingOnExit(waiter).name == "moved-in")
    }

    /// Written in place: waits while the writer holds it open, goes once it is closed.
    @Test(.timeLimit(.minutes(1)))
    func aFileStillOpenForWritingWaitsUntilClosed() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox(settleTime: .seconds(3600), rescanInterval: .seconds(3600))
        let descriptor = open(fixture.directory + "/written", O_CREAT | O_WRONLY | O_CLOEXEC, 0o644)
        #expect(descriptor >= 0)
        #expect(write(descriptor, "half", 4) == 4)
        #expect(try await outbox.next() == nil)
        let waiter = Task { try await outbox.waitForFile() }
        #expect(write(descriptor, " and the rest", 13) == 13)
        close(descriptor)
        let file = try await valueCancellingOnExit(waiter)
        #expect(file.name == "written" && file.bytes == Array("half and the rest".utf8))
    }

    /// Closed after writing, then written again: its status changed after the close was seen,
    /// so it settles as any file being written.
    @Test func aFileChangedAfterItsCloseSettlesAgain() throws {
        let completed = CompletedNames()
        let seen = FileTime.now()
        completed.record("report", at: seen)
        #expect(completed.isComplete("report", changedAt: seen))
        #expect(!completed.isComplete("report", changedAt: seen + .milliseconds(5)))
        #expect(!completed.isComplete("other", changedAt: seen))
        let bounded = CompletedNames(capacity: 2)
        bounded.record("a", at: seen)
        bounded.record("b", at: seen + .seconds(1))
        bounded.record("c", at: seen + .seconds(2))
        #expect(!bounded.isComplete("a", changedAt: seen) && bounded.isComplete("c", changedAt: seen))
    }

    @Test(.timeLimit(.minutes(1)))
    func waitForFileWakesOnANewFile() async throws {
        let fixture = try OutboxFixture()
        // Rescans only every hour: only the change notification can wake the waiter.
        let outbox = try fixture.outbox(rescanInterval: .seconds(3600))
        #expect(outbox.watchesChanges)
        let waiter = Task { try await outbox.waitForFile() }
        try fixture.drop("arrived", "hello")
        let file = try await valueCancellingOnExit(waiter)
        #expect(file.name == "arrived")
        #expect(file.bytes == Array("hello".utf8))
    }

    @Test(.timeLimit(.minutes(1)))
    func waitForFileStopsWhenCancelled() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox(rescanInterval: .seconds(3600))
        let waiter = Task { try await outbox.waitForFile() }
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }
    }

    @Test(.timeLimit(.minutes(1)))
    func rescansWithoutNotifications() async throws {
        let fixture = try OutboxFixture()
        let outbox = try Outbox(
            directory: FilePath(fixture.directory), maxFileSize: 100, settleTime: .zero,
            rescanInterval: .milliseconds(50), report: { _ in }, clock: FileTime.now, watchChanges: false)
        #expect(!outbox.watchesChanges)
        let waiter = Task { try await outbox.waitForFile() }
        try fixture.drop("late", "x")
        #expect(try await valueCancellingOnExit(waiter).name == "late")
    }

    @Test func exactlyOnceAcrossARestart() async throws {
        let fixture = try OutboxFixture()
        for index in 1...6 {
            try fixture.drop("m\(index)", "payload \(index)", secondsAgo: 100 - index)
        }
        var delivered: [String] = []
        do {
            let first = try fixture.outbox()
            for _ in 1...2 {
                let file = try #require(try await first.next())
                delivered.append(file.name)
                try await first.markDelivered(file)
            }
            // Claimed but never delivered: the process "dies" holding it.
            let interrupted = try #require(try await first.next())
            #expect(interrupted.name == "m3")
        }
        let second = try fixture.outbox()
        while let file = try await second.next() {
            #expect(file.bytes == Array("payload \(file.name.dropFirst())".utf8))
            delivered.append(file.name)
            try await second.markDelivered(file)
        }
        #expect(delivered == ["m1", "m2", "m3", "m4", "m5", "m6"])
        #expect(try fixture.waitingFiles() == [])
        #expect(try fixture.names(in: "sent") == ["m1", "m2", "m3", "m4", "m5", "m6"])
        for index in 1...6 {
            #expect(try fixture.contents("sent/m\(index)") == "payload \(index)")
        }
    }

    @Test func twoOutboxesOnOneDirectoryNeverServeTheSameFile() async throws {
        let fixture = try OutboxFixture()
        for index in 1...4 {
            try fixture.drop("f\(index)", "\(index)", secondsAgo: 100 - index)
        }
        let a = try fixture.outbox()
        let b = try fixture.outbox()
        let fromA = try #require(try await a.next())
        let fromB = try #require(try await b.next())
        #expect(fromA.name == "f1")
        #expect(fromB.name == "f2")
        // A gives f1 up without delivering it: B may take it.
        await a.release(fromA)
        try await b.markDelivered(fromB)
        #expect(try await b.next()?.name == "f1")
        #expect(try await a.next()?.name == "f3")
    }

    @Test func aFileReplacedWhileBeingSentIsNotMarkedDelivered() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("report", "version 1", secondsAgo: 10)
        let outbox = try fixture.outbox()
        let served = try #require(try await outbox.next())
        try fixture.drop("report", "version 2", secondsAgo: 5)
        #expect(try await outbox.markDelivered(served) == nil)
        #expect(try fixture.names(in: "sent") == [])
        let replacement = try #require(try await outbox.next())
        #expect(replacement.bytes == Array("version 2".utf8))
    }

    @Test func listingAVanishedDirectoryIsAnError() async throws {
        let fixture = try OutboxFixture()
        let outbox = try fixture.outbox()
        try FileManager.default.removeItem(atPath: fixture.directory)
        await #expect(throws: OutboxError.cannotList(fixture.directory, .noSuchFileOrDirectory)) {
            _ = try await outbox.next()
        }
    }

    @Test func drainingListsTheDirectoryOnceNotOncePerFile() async throws {
        let fixture = try OutboxFixture()
        for index in 1...20 {
            try fixture.drop(String(format: "m%02d", index), "payload \(index)", secondsAgo: 100 - index)
        }
        // The listing's age limit out of the way: each delivery suspends for its directory
        // flushes and waits for a thread to resume on, and on a loaded machine (the whole
        // suite at once) twenty of them can take longer than that limit.
        let outbox = try Outbox(
            directory: FilePath(fixture.directory), maxFileSize: 1 << 20, settleTime: .zero, rescanInterval: .seconds(3600),
            report: { _ in }, clock: FileTime.now, listingReuseLimit: .seconds(3600))
        #expect(outbox.watchesChanges)
        var served: [String] = []
        while let file = try await outbox.next() {
            served.append(file.name)
            #expect(try await outbox.markDelivered(file) != nil)
        }
        #expect(served == (1...20).map { String(format: "m%02d", $0) })
        #expect(try fixture.names(in: "sent").count == 20)
        // Our own moves to sent/ do not invalidate the listing; only the first call lists.
        #expect(await outbox.fullListings < 3)
    }

    @Test(.timeLimit(.minutes(1)))
    func aFileArrivingDuringADrainIsServed() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("first", "1", secondsAgo: 30)
        try fixture.drop("second", "2", secondsAgo: 20)
        let outbox = try fixture.outbox()
        let first = try #require(try await outbox.next())
        #expect(first.name == "first")
        let seen = outbox.changeGeneration
        try fixture.drop("newcomer", "3", secondsAgo: 25)   // sorts before "second"
        await outbox.waitForChange(after: seen, timeout: .seconds(30))
        #expect(outbox.changeGeneration != seen)
        #expect(try await outbox.markDelivered(first) != nil)
        #expect(try await outbox.next()?.name == "newcomer")
    }

    @Test func aListedFileRemovedMeanwhileIsSkipped() async throws {
        let fixture = try OutboxFixture()
        try fixture.drop("a", "1", secondsAgo: 30)
        try fixture.drop("b", "2", secondsAgo: 20)
        try fixture.drop("c", "3", secondsAgo: 10)
        let outbox = try fixture.outbox()
        let a = try #require(try await outbox.next())
        // Removal raises no change notification: the reused listing still names b.
        #expect(unlink(fixture.directory + "/b") == 0)
        #expect(try await outbox.markDelivered(a) != nil)
        #expect(try await outbox.next()?.name == "c")
    }
}
