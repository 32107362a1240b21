#if canImport(Glibc)
import Glibc
#endif
import DaemonSupport
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer

/// The bounds that keep a hostile or broken peer from stalling, starving, filling or crashing
/// a receiver (the option checks that keep a user's typo from trapping are in CLITests).
@Suite struct BoundsTests {
    // MARK: Minimum rate

    @Test func tricklingPeerIsRefusedAlthoughEveryValueResetsTheIdleTimer() {
        let payload = Array(String(repeating: "x", count: 400).utf8)
        let values = CentralLogicTests.compatValues(payload, chunk: 1)
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15),
                                       minimumRate: 10, rateGrace: .seconds(20))
        var refusedAt: Duration?
        // A 20-byte value (the smallest ATT payload) every 5 s: well inside the 15 s idle
        // timeout, 4 bytes/s against a floor of 10.
        for (index, value) in values.enumerated() {
            let time = Duration.seconds(5 * (index + 1))
            if case .failed(.refused(let bound, _)) = assembly.handle(.value(value), at: time) {
                #expect(bound == "min-rate")
                refusedAt = time
                break
            }
        }
        // At 30 s: 120 bytes received, 100 owed; at 35 s: 140 received, 150 owed.
        #expect(refusedAt == .seconds(35))
    }

    @Test func silentPeerIsRefusedByTheRateOnATick() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(3600),
                                       minimumRate: 1, rateGrace: .seconds(2))
        #expect(assembly.handle(.tick, at: .seconds(2)) == .proceed(progress: nil))
        guard case .failed(.refused("min-rate", _)) = assembly.handle(.tick, at: .seconds(3)) else {
            Issue.record("expected a min-rate refusal")
            return
        }
    }

    @Test func transferAtTheRateCompletes() {
        let payload = CentralTestData.binary(2000)
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15),
                                       minimumRate: 100, rateGrace: .seconds(1))
        var last: MessageAssembly.Step?
        // 20-byte values every 100 ms: 200 bytes/s, twice the floor.
        for (index, value) in CentralLogicTests.compatValues(payload).enumerated() {
            last = assembly.handle(.value(value), at: .milliseconds(100 * index))
        }
        guard case .complete(let message, _) = last else {
            Issue.record("expected completion, got \(String(describing: last))")
            return
        }
        #expect(message.payload == payload)
    }

    @Test func zeroRateMeansNoFloor() {
        var assembly = MessageAssembly(limits: .default, idleTimeout: .seconds(15), minimumRate: 0)
        #expect(assembly.rateShortfall(at: .seconds(1_000_000)) == nil)
        _ = assembly.handle(.tick, at: .seconds(1))
    }

    // MARK: Peer book: bounded and fair

    @Test func peerBookStaysWithinItsCapacityAndKeepsBackOffs() {
        var book = PeerBook(backoff: BackoffPolicy(initial: .seconds(60), maximum: .seconds(60)), minimumRSSI: nil, capacity: 8)
        book.recordFailure("00:00:00:00:00:01", at: .zero)
        for index in 0..<1000 {
            let address = String(format: "AA:00:00:00:%02X:%02X", index >> 8, index & 0xFF)
            _ = book.choose([PeerBook.Candidate(address: address, rssi: -50)], at: .seconds(1))
        }
        #expect(book.records.count <= 8)
        // The peer backing off was not evicted by the flood of new addresses.
        #expect(!book.isEligible("00:00:00:00:00:01", at: .seconds(2)))
    }

    @Test func rotatingAddressesDoNotStarveAProvenSender() {
        var book = PeerBook(backoff: BackoffPolicy(), minimumRSSI: nil)
        let real = "11:22:33:44:55:66"
        book.recordSuccess(real, at: .zero)
        var realVisits = 0
        for round in 0..<100 {
            let now = Duration.seconds(round + 1)
            let rotating = String(format: "C0:00:00:00:00:%02X", round)
            let candidates = [PeerBook.Candidate(address: rotating, rssi: -40), PeerBook.Candidate(address: real, rssi: -80)]
            guard let index = book.choose(candidates, at: now) else { continue }
            if candidates[index].address == real {
                realVisits += 1
                book.recordSuccess(real, at: now)
            } else {
                book.recordFailure(rotating, at: now)
            }
        }
        #expect(realVisits >= 50)
    }

    @Test func aProvenSenderWithEndlessMessagesLetsANewOneIn() {
        var book = PeerBook(backoff: BackoffPolicy(), minimumRSSI: nil)
        let flooder = "AA:AA:AA:AA:AA:AA"
        let newcomer = "BB:BB:BB:BB:BB:BB"
        book.recordSuccess(flooder, at: .zero)
        let candidates = [PeerBook.Candidate(address: flooder, rssi: -40), PeerBook.Candidate(address: newcomer, rssi: -80)]
        var picks: [String] = []
        for round in 0..<4 {
            guard let index = book.choose(candidates, at: .seconds(round + 1)) else { continue }
            picks.append(candidates[index].address)
            book.recordSuccess(candidates[index].address, at: .seconds(round + 1))
        }
        #expect(picks.contains(newcomer))
        #expect(picks.filter { $0 == flooder }.count <= 3)
    }

    @Test func anAddressTableDropsTheAddressSetLongestAgoAndOnlyThat() {
        var table = BoundedAddressTable<Int>(capacity: 3)
        for (index, address) in ["a", "b", "c"].enumerated() { table.set(index, for: address) }
        table.set(10, for: "a")   // a new value, not a new address: the order stays
        table.set(3, for: "d")    // one address too many: "a", set first, goes
        #expect(table.count == 3)
        #expect(table["a"] == nil && table["b"] == 1 && table["c"] == 2 && table["d"] == 3)
        #expect(table.removeValue(for: "c") == 2)
        #expect(table.removeValue(for: "c") == nil)
        table.set(4, for: "e")    // room again: nothing goes
        #expect(table["b"] == 1 && table["d"] == 3 && table["e"] == 4 && table.count == 3)
    }

    // MARK: Storage limits

    @Test func reserveAndQuotasRefuseBeforeReceiving() {
        let limits = StorageLimits(reserveBytes: 1000, quotaBytes: 50_000, quotaFiles: 3)
        let roomy = StorageLimits.Usage(freeBytes: 10_000, storedBytes: 0, storedFiles: 0)
        #expect(limits.refusal(for: 9000, usage: roomy) == nil)
        #expect(limits.refusal(for: 9001, usage: roomy)?.bound == .reserve)
        #expect(limits.refusal(for: Int.max, usage: roomy)?.bound == .reserve)
        #expect(limits.refusal(for: 10, usage: .init(freeBytes: 10_000, storedBytes: 0, storedFiles: 3))?.bound == .quotaFiles)
        #expect(limits.refusal(for: 10, usage: .init(freeBytes: 10_000, storedBytes: 49_995, storedFiles: 1))?.bound == .quotaBytes)
        #expect(limits.refusal(for: 5, usage: .init(freeBytes: 10_000, storedBytes: 49_995, storedFiles: 1)) == nil)
    }

    @Test func outputDirectoryCountsItsMessagesNotItsPartialFiles() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bounds-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let directory = try OutputDirectory(path: .init(path))
        try await directory.store(Array(repeating: 1, count: 100), baseName: "a.bin")
        try await directory.store(Array(repeating: 2, count: 50), baseName: "b.bin")
        _ = FileManager.default.createFile(atPath: path + "/.hidden", contents: Data(count: 1000))
        let stored = directory.storedMessages()
        #expect(stored.bytes == 150)
        #expect(stored.files == 2)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: 0, quotaFiles: 2))?.bound == .quotaFiles)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: 0, quotaFiles: 3)) == nil)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: Int.max))?.bound == .reserve)
        #expect((directory.freeSpace()?.bytes ?? 0) > 0)
    }

    /// M-3: a sender's tree, or `--folder-per-sender`'s folders, store below the top: the quota
    /// counts the whole tree, its directories too, and never through a symbolic link.
    @Test func quotasCountTheWholeTreeAndItsDirectories() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bounds-\(UUID().uuidString)").path
        let outside = path + "-outside"
        defer {
            try? FileManager.default.removeItem(atPath: path)
            try? FileManager.default.removeItem(atPath: outside)
        }
        let directory = try OutputDirectory(path: .init(path))
        // Thousands of 1-byte files in deep paths were invisible to the quota: each is counted.
        for index in 0..<20 {
            try await directory.store([UInt8(index)], baseName: "deep/er/and/deeper/\(index).bin")
        }
        try await directory.store(Array(repeating: 7, count: 100), baseName: "top.bin")
        try FileManager.default.createDirectory(atPath: outside + "/big", withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: outside + "/big/huge.bin", contents: Data(count: 50_000))
        #expect(symlink(outside, path + "/link") == 0)
        let stored = directory.storedMessages()
        #expect(stored.bytes == 120)
        // 21 files, 4 directories, 1 link (an inode, not followed).
        #expect(stored.files == 26)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: 0, quotaFiles: 26))?.bound == .quotaFiles)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: 0, quotaBytes: 120))?.bound == .quotaBytes)
        #expect(directory.refusal(for: 1, limits: StorageLimits(reserveBytes: 0, quotaBytes: 121, quotaFiles: 27)) == nil)
    }

    /// M-3: the reserve keeps inodes free as well as bytes: a file system out of inodes takes
    /// no message, whatever its free bytes; one without a fixed count is not held to it.
    @Test func theReserveKeepsInodesFree() {
        let limits = StorageLimits(reserveBytes: 0, reserveInodes: 100)
        let needed = 100 + StorageLimits.inodesPerMessage
        #expect(limits.refusal(for: 1, usage: .init(freeBytes: 1 << 30, storedBytes: 0, storedFiles: 0,
                                                    freeInodes: needed)) == nil)
        let refusal = limits.refusal(for: 1, usage: .init(freeBytes: 1 << 30, storedBytes: 0, storedFiles: 0,
                                                          freeInodes: needed - 1))
        #expect(refusal?.bound == .reserve)
        #expect(refusal?.reason.contains("inodes") == true)
        #expect(limits.refusal(for: 1, usage: .init(freeBytes: 1 << 30, storedBytes: 0, storedFiles: 0, freeInodes: nil)) == nil)
        #expect(StorageLimits.default.reserveInodes == StorageLimits.defaultReserveInodes)
    }

    // MARK: Escaping

    @Test func peerTextLosesEscapesAndBidiOverrides() {
        #expect(SafeText.escape("plain name ✓") == "plain name ✓")
        #expect(SafeText.escape("evil\u{1B}]0;title\u{07}\u{1B}[2J") == "evil\\x1b]0;title\\x07\\x1b[2J")
        #expect(SafeText.escape("a\u{9B}31mb") == "a\\x9b31mb")
        #expect(SafeText.escape("file\u{202E}txt.exe") == "file\\u{202e}txt.exe")
        #expect(SafeText.escape("two\nlines\r") == "two\\nlines\\r")
        #expect(SafeText.escape("two\nlines\tok\r", keepingLineBreaks: true) == "two\nlines\tok\\r")
    }

    @Test func terminalSinkEscapesButPipesStayExact() {
        let payload: [UInt8] = Array("hi\u{1B}[2J\nthere\t!".utf8) + [0xFF]
        #expect(FileDescriptorSink.terminalBytes(payload) == Array("hi\\x1b[2J\nthere\t!\u{FFFD}".utf8))
        #expect(!FileDescriptorSink(fileDescriptor: -1, escapesForTerminal: nil).escapesForTerminal)
    }
}
