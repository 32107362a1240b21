@testable import Daemon
import DaemonSupport
import Foundation
#if canImport(Glibc)
import Glibc
#endif
@testable import Machines
import Roles
@testable import Storage
import Synchronization
import SystemPackage
import Testing
import Transfer

/// The sender daemon's message source over a real outbox directory: what it offers, in which
/// order, what moves to sent/ and when, and what survives a restart.
@Suite(.timeLimit(.minutes(1)))
struct DaemonOutboxSourceTests {
    /// A temporary outbox; files get explicit modification times so the order is known.
    final class TemporaryOutbox {
        let path: FilePath
        let url: URL
        let events = Recorded()

        init() throws {
            url = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-outbox-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
            path = FilePath(url.path)
        }

        deinit { try? FileManager.default.removeItem(at: url) }

        /// Writes `name` under a hidden name, sets its time, then renames it in (as users should).
        func drop(_ name: String, _ bytes: [UInt8], secondsAgo: Double = 100) throws {
            // A name may hold a peer folder (`laptop/x.txt`): the hidden name is beside it.
            let target = url.appendingPathComponent(name)
            let hidden = target.deletingLastPathComponent().appendingPathComponent(".\(target.lastPathComponent).incoming")
            try Data(bytes).write(to: hidden)
            try FileManager.default.setAttributes(
                [.modificationDate: Date(timeIntervalSinceNow: -secondsAgo)], ofItemAtPath: hidden.path)
            try FileManager.default.moveItem(at: hidden, to: url.appendingPathComponent(name))
        }

        func source(listingReuseLimit: Duration = OutboxMessageSource.folderRescan) throws -> OutboxMessageSource {
            let events = self.events
            return try OutboxMessageSource(directory: path, maximumFileSize: 1000, settleTime: .zero,
                                           retryDelay: .milliseconds(50), listingReuseLimit: listingReuseLimit,
                                           report: { events.append($0) })
        }

        func names(in subdirectory: String? = nil) throws -> [String] {
            let directory = subdirectory.map { url.appendingPathComponent($0) } ?? url
            var isDirectory: ObjCBool = false
            return try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { name in
                FileManager.default.fileExists(atPath: directory.appendingPathComponent(name).path, isDirectory: &isDirectory)
                    && !isDirectory.boolValue
            }.sorted()
        }

        func contents(_ relativePath: String) throws -> [UInt8] {
            [UInt8](try Data(contentsOf: url.appendingPathComponent(relativePath)))
        }
    }

    final class Recorded: Sendable {
        private let list = Mutex<[OutboxSourceEvent]>([])
        func append(_ event: OutboxSourceEvent) { list.withLock { $0.append(event) } }
        var all: [OutboxSourceEvent] { list.withLock { $0 } }
    }

    static func summary(_ message: OutgoingMessage) -> MessageSummary {
        MessageSummary(sequence: 1, byteCount: message.payload.count, format: .secure)
    }

    static let peer = PeerDescription(address: "00:AA:00:00:00:02")

    @Test("serves files oldest first and moves each into sent/ only once delivered")
    func ordersAndMovesDelivered() async throws {
        let outbox = try TemporaryOutbox()
        try outbox.drop("b-newest.txt", Array("third".utf8), secondsAgo: 10)
        try outbox.drop("c-oldest.bin", [0, 1, 2, 255], secondsAgo: 300)
        try outbox.drop("a-middle.txt", Array("second".utf8), secondsAgo: 200)
        let source = try outbox.source()

        var served: [[UInt8]] = []
        for _ in 0..<3 {
            let message = try #require(await source.current())
            // Asking again before delivery offers the same message; nothing moved yet.
            #expect(await source.current() == message)
            #expect(try outbox.names(in: "sent").count == served.count)
            served.append(message.payload)
            await source.markDelivered(message, summary: Self.summary(message), to: Self.peer)
        }
        #expect(served == [[0, 1, 2, 255], Array("second".utf8), Array("third".utf8)])
        #expect(try outbox.names() == [])
        #expect(try outbox.names(in: "sent") == ["a-middle.txt", "b-newest.txt", "c-oldest.bin"])
        #expect(try outbox.contents("sent/c-oldest.bin") == [0, 1, 2, 255])
        #expect(await source.deliveredCount == 3)
        let moved = outbox.events.all.compactMap { if case .moved(let file, let to) = $0 { (file.name, to) } else { nil } }
        #expect(moved.map(\.0) == ["c-oldest.bin", "a-middle.txt", "b-newest.txt"])
        #expect(moved.allSatisfy { $0.1 != nil })
    }

    @Test("outbox/NAME/ holds files for the peer NAME only: the top first, then each folder; message(for:) finds a peer's own")
    func peerFoldersAreAddressed() async throws {
        let outbox = try TemporaryOutbox()
        try FileManager.default.createDirectory(at: outbox.url.appendingPathComponent("laptop"), withIntermediateDirectories: true)
        try FileManager.default.createDirectory(at: outbox.url.appendingPathComponent("phone"), withIntermediateDirectories: true)
        try outbox.drop("laptop/for-laptop.txt", Array("L".utf8), secondsAgo: 300)
        try outbox.drop("phone/for-phone.txt", Array("P".utf8), secondsAgo: 300)
        try outbox.drop("anyone.txt", Array("A".utf8), secondsAgo: 10)
        let source = try outbox.source()
        let laptop = AuthenticatedPeer(keyLine: "k", fingerprint: "SHA256:laptop", name: "laptop")
        let tablet = AuthenticatedPeer(keyLine: "k", fingerprint: "SHA256:tablet", name: "tablet")

        // The top comes first, for anyone.
        let first = try #require(await source.current())
        #expect(first.payload == Array("A".utf8) && first.addressee == nil)
        #expect(first.isAddressed(to: tablet))
        await source.markDelivered(first, summary: Self.summary(first), to: Self.peer)

        // Then the folders by name, each message addressed to its folder's peer.
        let second = try #require(await source.current())
        #expect(second.payload == Array("L".utf8) && second.addressee == "laptop")
        #expect(second.isAddressed(to: laptop) && !second.isAddressed(to: tablet))
        // A peer with nothing of its own (and nothing at the top) keeps the current offer.
        #expect(await source.message(for: tablet) == nil)
        #expect(await source.current() == second)

        // The phone, refused the laptop's file, is offered its own.
        let phone = AuthenticatedPeer(keyLine: "k", fingerprint: "SHA256:phone", name: "phone")
        let forPhone = try #require(await source.message(for: phone))
        #expect(forPhone.payload == Array("P".utf8) && forPhone.addressee == "phone")
        await source.markDelivered(forPhone, summary: Self.summary(forPhone), to: Self.peer)
        #expect(try outbox.names(in: "phone/sent") == ["for-phone.txt"])
        #expect(try outbox.names(in: "phone") == [])
        // The laptop's file is still there, and offered again.
        #expect(try outbox.names(in: "laptop") == ["for-laptop.txt"])
        #expect(await source.current() == second)
        // An unlisted key (encrypted, not authenticated) is never an addressee.
        let unlisted = AuthenticatedPeer(keyLine: "k", fingerprint: "SHA256:laptop", name: "laptop", isListed: false)
        #expect(!second.isAddressed(to: unlisted) && !second.isAddressed(to: nil))
    }

    /// M-2, against the daemon's source: `outbox/her-laptop/` exchanged with a symbolic link to
    /// the service's state directory (`renameat2(RENAME_EXCHANGE)`, as a member of the group can)
    /// after the source has opened the folder. Her laptop asks again and again while the swap
    /// is in place: it is offered nothing from the state directory, and its own file again once
    /// the folder is back.
    @Test("a peer folder swapped for a symbolic link to the state directory sends nothing from there")
    func aSwappedPeerFolderSendsNothingFromOutside() async throws {
        let outbox = try TemporaryOutbox()
        let state = outbox.url.deletingLastPathComponent().appendingPathComponent("state-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        try Data("SECRET KEY".utf8).write(to: state.appendingPathComponent("identity"))
        try FileManager.default.createDirectory(at: outbox.url.appendingPathComponent("her-laptop"), withIntermediateDirectories: true)
        try outbox.drop("her-laptop/note.txt", Array("hers".utf8), secondsAgo: 100)
        let source = try outbox.source()
        let herLaptop = AuthenticatedPeer(keyLine: "k", fingerprint: "SHA256:laptop", name: "her-laptop")
        let first = try #require(await source.message(for: herLaptop))
        #expect(first.payload == Array("hers".utf8))

        #expect(symlink(state.path, outbox.url.appendingPathComponent(".swap").path) == 0)
        let top = open(outbox.path.string, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(top) }
        typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
        let renameAt2 = unsafeBitCast(try #require(dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2")), to: RenameAt2.self)
        #expect(renameAt2(top, "her-laptop", top, ".swap", 2 /* RENAME_EXCHANGE */) == 0)

        for _ in 0..<20 {
            if let offered = await source.message(for: herLaptop) {
                #expect(offered.payload != Array("SECRET KEY".utf8), "the state directory's identity was offered")
            }
            if let offered = await source.nextAvailableNow() {
                #expect(offered.payload != Array("SECRET KEY".utf8), "the state directory's identity was offered")
            }
        }
        // Nothing was moved into or written under the state directory.
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.path) == ["identity"])

        // Swapped back: once the watcher has seen it, the folder is opened again and served.
        let box = await source.outbox
        let seen = box.changeGeneration
        #expect(renameAt2(top, "her-laptop", top, ".swap", 2) == 0)
        await box.waitForChange(after: seen, timeout: .seconds(10))
        let again = try #require(await source.message(for: herLaptop))
        #expect(again.payload == Array("hers".utf8))
    }

    @Test("draining many files lists the peer folders once, not per message; a folder made meanwhile is still found")
    func aDrainDoesNotListTheFoldersPerMessage() async throws {
        let outbox = try TemporaryOutbox()
        for index in 0..<30 { try outbox.drop(String(format: "f%02d.txt", index), Array("\(index)".utf8), secondsAgo: Double(300 - index)) }
        // Each delivery flushes the disk; on a loaded machine 30 of them outlast the reuse limit.
        let source = try outbox.source(listingReuseLimit: .seconds(3600))
        let box = await source.outbox
        guard box.watchesChanges else { return }  // no inotify: every call lists (a safety net)
        var message = try #require(await source.current())
        var served = 1
        while true {
            await source.markDelivered(message, summary: Self.summary(message), to: Self.peer)
            guard let next = await source.nextAvailableNow() else { break }
            message = next
            served += 1
        }
        #expect(served == 30)
        #expect(await source.folderListings == 1)

        // A folder made (an arrival the watcher reports) is listed again and served.
        let seen = box.changeGeneration
        try FileManager.default.createDirectory(at: outbox.url.appendingPathComponent("laptop"), withIntermediateDirectories: true)
        try outbox.drop("laptop/late.txt", Array("late".utf8))
        await box.waitForChange(after: seen, timeout: .seconds(5))
        let late = try #require(await source.nextAvailableNow())
        #expect(late.payload == Array("late".utf8) && late.addressee == "laptop")
        #expect(await source.folderListings == 2)
    }

    @Test("a message that was not delivered stays in the outbox and is offered again, also after a restart")
    func undeliveredStays() async throws {
        let outbox = try TemporaryOutbox()
        try outbox.drop("one.txt", Array("one".utf8), secondsAgo: 20)
        try outbox.drop("two.txt", Array("two".utf8), secondsAgo: 10)
        do {
            let source = try outbox.source()
            let message = try #require(await source.current())
            #expect(message.payload == Array("one".utf8))
            // The transfer was cut short: no markDelivered. Something else being reported as
            // delivered (not the current message) must not move anything either.
            let other = OutgoingMessage(payload: Array("two".utf8))
            await source.markDelivered(other, summary: Self.summary(other), to: Self.peer)
            #expect(try outbox.names(in: "sent") == [])
            #expect(await source.current() == message)
        }
        // The daemon restarts: a new source on the same directory.
        let restarted = try outbox.source()
        let again = try #require(await restarted.current())
        #expect(again.payload == Array("one".utf8))
        #expect(try outbox.names() == ["one.txt", "two.txt"])
    }

    @Test("after a restart, files already delivered are never offered again: each goes out exactly once")
    func restartDeliversExactlyOnce() async throws {
        let outbox = try TemporaryOutbox()
        for index in 1...4 {
            try outbox.drop("file\(index).txt", Array("payload \(index)".utf8), secondsAgo: Double(100 - index))
        }
        var delivered: [[UInt8]] = []
        do {
            let first = try outbox.source()
            for _ in 0..<2 {
                let message = try #require(await first.current())
                delivered.append(message.payload)
                await first.markDelivered(message, summary: Self.summary(message), to: Self.peer)
            }
            // The third is being sent when the daemon stops.
            _ = await first.current()
        }
        let second = try outbox.source()
        for _ in 0..<2 {
            let message = try #require(await second.current())
            delivered.append(message.payload)
            await second.markDelivered(message, summary: Self.summary(message), to: Self.peer)
        }
        #expect(delivered == (1...4).map { Array("payload \($0)".utf8) })
        #expect(try outbox.names() == [])
        #expect(try outbox.names(in: "sent") == (1...4).map { "file\($0).txt" })
    }

    @Test("an empty outbox makes current() wait until a file is moved in")
    func waitsForNewFiles() async throws {
        let outbox = try TemporaryOutbox()
        let source = try outbox.source()
        let waiting = Task { await source.current() }
        // A file being written under a hidden name is not served...
        try Data("not yet".utf8).write(to: outbox.url.appendingPathComponent(".late.txt"))
        // ...until it is renamed in.
        try FileManager.default.moveItem(at: outbox.url.appendingPathComponent(".late.txt"),
                                         to: outbox.url.appendingPathComponent("late.txt"))
        let message = try #require(await waiting.value)
        #expect(message.payload == Array("not yet".utf8))
        let served = outbox.events.all.compactMap { if case .serving(let file) = $0 { file.name } else { nil } }
        #expect(served == ["late.txt"])
    }

    @Test("cancelling a waiting current() returns nil at once and moves nothing")
    func cancellationEndsTheWait() async throws {
        let outbox = try TemporaryOutbox()
        let source = try outbox.source()
        let waiting = Task { await source.current() }
        waiting.cancel()
        #expect(await waiting.value == nil)
        #expect(try outbox.names(in: "sent") == [])
    }

    @Test("files that can never be sent go to failed/ with a reason; the next file is served")
    func quarantinesUnsendableFiles() async throws {
        let outbox = try TemporaryOutbox()
        try outbox.drop("empty.txt", [], secondsAgo: 30)
        try outbox.drop("huge.bin", [UInt8](repeating: 7, count: 1001), secondsAgo: 20)
        try outbox.drop("fine.txt", Array("fine".utf8), secondsAgo: 10)
        let source = try outbox.source()
        let message = try #require(await source.current())
        #expect(message.payload == Array("fine".utf8))
        #expect(try outbox.names(in: "failed") == ["empty.txt", "empty.txt.reason", "huge.bin", "huge.bin.reason"])
        let quarantined = outbox.events.all.compactMap {
            if case .notice(.quarantined(let name, _, _)) = $0 { name } else { nil }
        }
        #expect(quarantined.sorted() == ["empty.txt", "huge.bin"])
    }

    @Test("a file removed by hand while it was sent: delivery moves nothing and the next file is served")
    func removedWhileSending() async throws {
        let outbox = try TemporaryOutbox()
        try outbox.drop("gone.txt", Array("gone".utf8), secondsAgo: 20)
        try outbox.drop("next.txt", Array("next".utf8), secondsAgo: 10)
        let source = try outbox.source()
        let message = try #require(await source.current())
        try FileManager.default.removeItem(at: outbox.url.appendingPathComponent("gone.txt"))
        await source.markDelivered(message, summary: Self.summary(message), to: Self.peer)
        #expect(try outbox.names(in: "sent") == [])
        #expect(await source.current()?.payload == Array("next".utf8))
    }

    @Test("pipeline: the files sent ahead and prepared ahead come next in order, whatever arrived since, each claimed meanwhile")
    func preparedAheadComesNext() async throws {
        let outbox = try TemporaryOutbox()
        for (index, name) in ["1.txt", "2.txt", "3.txt", "4.txt"].enumerated() {
            try outbox.drop(name, Array(name.utf8), secondsAgo: 100 - Double(index))
        }
        let source = try outbox.source()
        let first = try #require(await source.current())
        let upcoming = try #require(await source.upcomingNow(skipping: 0))
        // With the window full, the file after the one sent ahead is prepared.
        #expect(await source.upcomingNow(skipping: 1)?.payload == Array("3.txt".utf8))
        #expect([first, upcoming].map(\.payload) == [Array("1.txt".utf8), Array("2.txt".utf8)])
        // Another daemon on the same outbox is kept off the three files this one holds.
        let other = try Outbox(directory: outbox.path, maxFileSize: 1000, settleTime: .zero)
        let unheld = try #require(try await other.next())
        #expect(unheld.name == "4.txt")
        await other.release(unheld)
        // A file older than all of them arrives: the session's order does not change, since
        // the second file may be on the air already.
        let box = await source.outbox
        let seen = box.changeGeneration
        try outbox.drop("0-late.txt", Array("late".utf8), secondsAgo: 1000)
        await box.waitForChange(after: seen, timeout: .seconds(5))
        await source.markDelivered(first, summary: Self.summary(first), to: Self.peer)
        #expect(await source.nextAvailableNow() == upcoming)
        #expect(await source.upcomingNow(skipping: 0)?.payload == Array("3.txt".utf8))
        await source.markDelivered(upcoming, summary: Self.summary(upcoming), to: Self.peer)
        #expect(await source.nextAvailableNow()?.payload == Array("3.txt".utf8))
        // Once the session is over the outbox's order holds again: the late file is next.
        #expect(await source.current()?.payload == Array("late".utf8))
        #expect(try outbox.names(in: "sent") == ["1.txt", "2.txt"])
    }
}
