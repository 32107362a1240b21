import Foundation
import Glibc
import Synchronization
import SystemPackage
import Testing

@testable import DaemonSupport

/// `renameat2(2)` with `RENAME_EXCHANGE`: the two names trade places atomically, as a member of
/// the outbox's group can do to a folder and a symbolic link (Glibc's module does not export
/// the call; it is looked up as the outbox looks up `RENAME_NOREPLACE`'s).
func exchange(_ first: String, _ second: String, in directory: String) -> Int32 {
    typealias RenameAt2 = @convention(c) (Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32) -> Int32
    guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return ENOSYS }
    let renameAt2 = unsafeBitCast(symbol, to: RenameAt2.self)
    let fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    defer { close(fd) }
    return renameAt2(fd, first, fd, second, 2 /* RENAME_EXCHANGE */) == 0 ? 0 : errno
}

/// M-2: a per-peer folder of the outbox swapped for a symbolic link to a directory only the
/// service may read (`renameat2(RENAME_EXCHANGE)`, as a member of the group can) makes the
/// outbox send nothing from there, move nothing there, and write no reason file there.
@Suite struct OutboxSwapTests {
    /// The outbox, a peer folder in it with one file of its own, and a "state directory" beside
    /// it holding a secret; a symbolic link to that directory waits under a hidden name.
    final class Setup {
        let root: String
        let top: String
        let folder: String
        let secret: String

        init() throws {
            root = try makeTemporaryDirectory()
            top = root + "/outbox"
            folder = top + "/her-laptop"
            secret = root + "/state"
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: secret + "/sent", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: secret + "/failed", withIntermediateDirectories: true)
            try "SECRET KEY".write(toFile: secret + "/identity", atomically: false, encoding: .utf8)
            try "".write(toFile: secret + "/empty", atomically: false, encoding: .utf8)
            try "hers".write(toFile: folder + "/note.txt", atomically: false, encoding: .utf8)
            #expect(symlink(secret, top + "/.swap") == 0)
        }

        deinit { try? FileManager.default.removeItem(atPath: root) }

        func swap() throws {
            let error = exchange("her-laptop", ".swap", in: top)
            try #require(error == 0, "renameat2(RENAME_EXCHANGE): \(String(cString: strerror(error)))")
        }

        func secretIsUntouched() throws -> Bool {
            try FileManager.default.contentsOfDirectory(atPath: secret).sorted() == ["empty", "failed", "identity", "sent"]
                && FileManager.default.contentsOfDirectory(atPath: secret + "/sent").isEmpty
                && FileManager.default.contentsOfDirectory(atPath: secret + "/failed").isEmpty
        }
    }

    @Test func aFolderSwappedForASymbolicLinkIsNotServedFrom() async throws {
        let setup = try Setup()
        let top = try Outbox(directory: FilePath(setup.top), maxFileSize: 1 << 20, settleTime: .zero)
        let folder = try Outbox(folder: "her-laptop", in: top)
        try setup.swap()
        #expect(!folder.isStillInPlace)
        // The name now leads to the state directory: its identity is not served, its empty
        // file is not moved to failed/ (nor a reason written there).
        await #expect(throws: OutboxError.replaced(setup.folder)) { _ = try await folder.next() }
        #expect(try setup.secretIsUntouched())
        // The name is a symbolic link: a new outbox on it is refused, not opened through it.
        #expect(throws: OutboxError.notADirectory(setup.folder)) { _ = try Outbox(folder: "her-laptop", in: top) }
        // Swapped back, it serves its own file again.
        try setup.swap()
        let file = try #require(try await folder.next())
        #expect(file.bytes == Array("hers".utf8))
    }

    /// The same for an outbox opened by its path (the daemon's own `--outbox`, or a folder as
    /// earlier versions opened them): listed and opened by path, it served the state
    /// directory's identity after the swap.
    @Test func anOutboxOpenedByPathAndSwappedIsNotServedFrom() async throws {
        let setup = try Setup()
        let folder = try Outbox(directory: FilePath(setup.folder), maxFileSize: 1 << 20, settleTime: .zero)
        try setup.swap()
        await #expect(throws: OutboxError.replaced(setup.folder)) { _ = try await folder.next() }
        #expect(try setup.secretIsUntouched())
    }

    /// A file claimed before the swap and delivered after it goes into the folder's own sent/,
    /// never into the directory the name leads to now.
    @Test func aDeliveryAfterTheSwapMovesIntoTheFoldersOwnSentDirectory() async throws {
        let setup = try Setup()
        let top = try Outbox(directory: FilePath(setup.top), maxFileSize: 1 << 20, settleTime: .zero)
        let folder = try Outbox(folder: "her-laptop", in: top)
        let file = try #require(try await folder.next())
        try setup.swap()
        _ = try await folder.markDelivered(file)
        #expect(try setup.secretIsUntouched())
        // The folder itself now lives under the hidden name: its sent/ holds the file.
        #expect(try FileManager.default.contentsOfDirectory(atPath: setup.top + "/.swap/sent") == ["note.txt"])
    }

    /// sent/ swapped for a link: the move goes into a real directory under that name or fails,
    /// never through the link.
    @Test func aSentDirectorySwappedForASymbolicLinkIsNotMovedInto() async throws {
        let setup = try Setup()
        let top = try Outbox(directory: FilePath(setup.top), maxFileSize: 1 << 20, settleTime: .zero)
        let folder = try Outbox(folder: "her-laptop", in: top)
        let file = try #require(try await folder.next())
        #expect(symlink(setup.secret + "/sent", setup.folder + "/.sent-link") == 0)
        #expect(exchange("sent", ".sent-link", in: setup.folder) == 0)
        await #expect(throws: OutboxError.self) { _ = try await folder.markDelivered(file) }
        #expect(try setup.secretIsUntouched())
        #expect(FileManager.default.fileExists(atPath: setup.folder + "/note.txt"))
    }

    /// The race the review reasoned about, run for real: a thread swaps the folder and the link
    /// back and forth as fast as it can while the outbox lists, claims, reads and quarantines.
    /// Whatever the interleaving, only the folder's own file is ever served, and nothing in the
    /// state directory is moved or written.
    @Test(.timeLimit(.minutes(1)))
    func racingSwapsNeverServeAnythingFromOutside() async throws {
        let setup = try Setup()
        let top = try Outbox(directory: FilePath(setup.top), maxFileSize: 1 << 20, settleTime: .zero)
        let folder = try Outbox(folder: "her-laptop", in: top)
        let swapper = Swapper(top: setup.top)
        var served = 0
        for _ in 0..<2000 {
            if let file = try? await folder.next() {
                #expect(file.bytes == Array("hers".utf8), "served \(file.name): \(file.bytes.count) bytes")
                await folder.release(file)
                served += 1
            }
        }
        let swaps = await swapper.stop()
        #expect(swaps > 100)
        #expect(served > 0)
        #expect(try setup.secretIsUntouched())
    }
}

/// Exchanges `outbox/her-laptop` and `outbox/.swap` on a thread of its own until stopped.
final class Swapper: Sendable {
    private let stopping = Atomic<Bool>(false)
    private let count = Atomic<Int>(0)
    private let finished = DispatchSemaphore(value: 0)

    init(top: String) {
        Thread.detachNewThread { [self] in
            while !stopping.load(ordering: .relaxed) {
                if exchange("her-laptop", ".swap", in: top) == 0 { count.add(1, ordering: .relaxed) }
            }
            finished.signal()
        }
    }

    /// Stops the thread, waits for it to end and returns how many exchanges it made.
    func stop() async -> Int {
        stopping.store(true, ordering: .relaxed)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                self.finished.wait()
                continuation.resume()
            }
        }
        return count.load(ordering: .relaxed)
    }
}
