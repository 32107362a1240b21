import Foundation
@testable import Machines
@testable import Storage
import Testing
import Transfer
import Trust

@testable import Roles

/// The receiver's resume spool: keys, incremental prefixes, permissions, bounds and eviction.
@Suite struct ResumeSpoolTests {
    static func directory() -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("spool-\(UUID().uuidString)/nested/spool").path
    }

    static func header(_ payload: [UInt8], message: UInt32 = 0) -> MessageHeader {
        MessageHeader(message: message, payloadLength: UInt64(payload.count), digest: OutgoingMessage(payload: payload).digest, metadata: nil)
    }

    static func key() -> PeerKey { HostIdentity().publicKey }

    static func mode(_ path: String) -> Int {
        ((try? FileManager.default.attributesOfItem(atPath: path)[.posixPermissions]) as? Int) ?? -1
    }

    @Test func keepsTheContiguousPrefixPerSenderAndMessage() throws {
        let spool = try ResumeSpool(directory: Self.directory())
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let payload = (0..<10_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let header = Self.header(payload)
        let sender = Self.key(), other = Self.key()
        spool.append(sender: sender, header: header, offset: 0, bytes: Array(payload[0..<4096]))
        spool.append(sender: sender, header: header, offset: 4096, bytes: Array(payload[4096..<6000]))
        // A gap is not kept: the entry stays the contiguous prefix.
        spool.append(sender: sender, header: header, offset: 8000, bytes: Array(payload[8000..<9000]))
        #expect(spool.heldPrefix(sender: sender, header: header) == Array(payload[0..<6000]))
        // Another sender, another digest or another length: nothing held.
        #expect(spool.heldPrefix(sender: other, header: header).isEmpty)
        #expect(spool.heldPrefix(sender: sender, header: Self.header(Array(payload.dropLast()))).isEmpty)
        var sameDigestOtherLength = header
        sameDigestOtherLength.payloadLength += 1
        #expect(spool.heldPrefix(sender: sender, header: sameDigestOtherLength).isEmpty)
        // The message number does not matter (it restarts at 0 every session).
        #expect(spool.heldPrefix(sender: sender, header: Self.header(payload, message: 5)).count == 6000)
        spool.remove(sender: sender, header: header)
        #expect(spool.heldPrefix(sender: sender, header: header).isEmpty)
        #expect(spool.entries().isEmpty)
    }

    @Test func directoryIs0700AndEntries0600() throws {
        let path = Self.directory()
        defer { try? FileManager.default.removeItem(atPath: path) }
        // A directory made with a loose mode is made private.
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o755])
        let spool = try ResumeSpool(directory: path)
        #expect(Self.mode(path) == 0o700)
        let payload = [UInt8](repeating: 1, count: 100)
        spool.append(sender: Self.key(), header: Self.header(payload), offset: 0, bytes: payload)
        let names = try FileManager.default.contentsOfDirectory(atPath: path)
        #expect(names.count == 1)
        #expect(Self.mode(path + "/" + names[0]) == 0o600)
    }

    @Test func aFileInPlaceOfTheDirectoryIsUnusable() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("spool-file-\(UUID().uuidString)").path
        _ = FileManager.default.createFile(atPath: path, contents: Data([1]))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(throws: ResumeSpool.SpoolError.self) { _ = try ResumeSpool(directory: path) }
    }

    @Test func theSizeBoundEvictsTheOldestFirstAndCapsAnEntry() throws {
        let spool = try ResumeSpool(directory: Self.directory(), bounds: .init(maximumBytes: 10_000))
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let sender = Self.key()
        let old = [UInt8](repeating: 1, count: 6_000), recent = [UInt8](repeating: 2, count: 3_000)
        let big = [UInt8](repeating: 3, count: 20_000)
        spool.append(sender: sender, header: Self.header(old), offset: 0, bytes: old)
        // Older by its modification time than what follows.
        let oldName = spool.entries()[0].name
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -60)],
                                              ofItemAtPath: spool.directory + "/" + oldName)
        spool.append(sender: sender, header: Self.header(recent), offset: 0, bytes: recent)
        #expect(spool.entries().count == 2)
        // 4 KiB of a third message: the oldest goes, the recent one stays.
        spool.append(sender: sender, header: Self.header(big), offset: 0, bytes: Array(big[0..<4096]))
        #expect(spool.heldPrefix(sender: sender, header: Self.header(old)).isEmpty)
        #expect(spool.heldPrefix(sender: sender, header: Self.header(recent)) == recent)
        // More of it: the recent one goes too, then the bound stops the entry growing.
        for offset in stride(from: 4096, to: 20_000, by: 4096) {
            spool.append(sender: sender, header: Self.header(big), offset: offset,
                         bytes: Array(big[offset..<min(offset + 4096, big.count)]))
        }
        let held = spool.heldPrefix(sender: sender, header: Self.header(big))
        #expect(held.count == 8192)
        #expect(spool.entries().map(\.bytes).reduce(0, +) <= 10_000)
        #expect(spool.heldPrefix(sender: sender, header: Self.header(recent)).isEmpty)
    }

    @Test func theEntryBoundEvictsTheOldestWhenAMessageStarts() throws {
        let spool = try ResumeSpool(directory: Self.directory(), bounds: .init(maximumEntries: 3))
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let sender = Self.key()
        let payloads = (1...4).map { [UInt8](repeating: UInt8($0), count: 100 * $0) }
        for (age, payload) in zip([400, 300, 200], payloads) {
            spool.append(sender: sender, header: Self.header(payload), offset: 0, bytes: payload)
            let name = ResumeSpool.entryName(sender: sender, digest: Self.header(payload).digest,
                                             length: UInt64(payload.count))
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -Double(age))],
                                                  ofItemAtPath: spool.directory + "/" + name)
        }
        #expect(spool.entries().count == 3)
        // A fourth message: the oldest entry makes room, the others stay.
        spool.append(sender: sender, header: Self.header(payloads[3]), offset: 0, bytes: payloads[3])
        #expect(spool.entries().count == 3)
        #expect(spool.heldPrefix(sender: sender, header: Self.header(payloads[0])).isEmpty)
        for payload in payloads.dropFirst() {
            #expect(spool.heldPrefix(sender: sender, header: Self.header(payload)) == payload)
        }
    }

    @Test func heldBytesAreCountedAsAppendedAndRemoved() throws {
        let spool = try ResumeSpool(directory: Self.directory())
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let sender = Self.key()
        let first = [UInt8](repeating: 5, count: 10_000), second = [UInt8](repeating: 6, count: 3_000)
        spool.append(sender: sender, header: Self.header(first), offset: 0, bytes: Array(first[0..<4000]))
        spool.append(sender: sender, header: Self.header(first), offset: 4000, bytes: Array(first[4000...]))
        spool.append(sender: sender, header: Self.header(second), offset: 0, bytes: second)
        // Bytes held elsewhere (a gap) are not written, so not counted.
        spool.append(sender: sender, header: Self.header(second), offset: 5000, bytes: [1, 2, 3])
        #expect(spool.heldBytes == 13_000)
        #expect(spool.heldBytes == spool.entries().map(\.bytes).reduce(0, +))
        spool.remove(sender: sender, header: Self.header(first))
        #expect(spool.heldBytes == 3_000)
        spool.remove(sender: sender, header: Self.header(second))
        #expect(spool.heldBytes == 0)
    }

    @Test func noByteIsKeptPastTheReserve() throws {
        // A reserve no file system here has free: the checkpoint keeps nothing.
        let spool = try ResumeSpool(directory: Self.directory(), bounds: .init(reserveBytes: Int.max / 2))
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let payload = [UInt8](repeating: 7, count: 1000)
        spool.append(sender: Self.key(), header: Self.header(payload), offset: 0, bytes: payload)
        #expect(spool.entries().isEmpty)
        #expect(spool.heldBytes == 0)
        // The same spool without a reserve keeps it.
        let open = try ResumeSpool(directory: spool.directory)
        open.append(sender: Self.key(), header: Self.header(payload), offset: 0, bytes: payload)
        #expect(open.entries().count == 1)
    }

    @Test func entriesPastTheAgeAreRemovedWhenOpenedOrCleaned() throws {
        let path = Self.directory()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let sender = Self.key()
        let payload = [UInt8](repeating: 9, count: 500)
        let fresh = [UInt8](repeating: 8, count: 500)
        do {
            let spool = try ResumeSpool(directory: path, bounds: .init(maximumAge: .seconds(3600)))
            spool.append(sender: sender, header: Self.header(payload), offset: 0, bytes: payload)
            spool.append(sender: sender, header: Self.header(fresh), offset: 0, bytes: fresh)
            let name = ResumeSpool.entryName(sender: sender, digest: Self.header(payload).digest, length: 500)
            try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSinceNow: -7200)],
                                                  ofItemAtPath: path + "/" + name)
        }
        // A restart opens the spool again: the stale entry goes, the fresh one stays.
        let reopened = try ResumeSpool(directory: path, bounds: .init(maximumAge: .seconds(3600)))
        #expect(reopened.heldPrefix(sender: sender, header: Self.header(payload)).isEmpty)
        #expect(reopened.heldPrefix(sender: sender, header: Self.header(fresh)) == fresh)
        reopened.clean(now: Date(timeIntervalSinceNow: 7200))
        #expect(reopened.entries().isEmpty)
    }

    @Test func anEntryLongerThanItsMessageIsDropped() throws {
        let spool = try ResumeSpool(directory: Self.directory())
        defer { try? FileManager.default.removeItem(atPath: spool.directory) }
        let sender = Self.key()
        let payload = [UInt8](repeating: 4, count: 100)
        let header = Self.header(payload)
        // Bytes beyond the length can only come from tampering with the file.
        let name = ResumeSpool.entryName(sender: sender, digest: header.digest, length: 100)
        _ = FileManager.default.createFile(atPath: spool.directory + "/" + name, contents: Data(count: 200))
        #expect(spool.heldPrefix(sender: sender, header: header).isEmpty)
        #expect(spool.entries().isEmpty)
    }

    @Test func defaultDirectoriesFollowXDGAndTheStateDirectory() {
        #expect(ResumeSpool.defaultInteractiveDirectory(environment: ["XDG_STATE_HOME": "/x/state"], homeDirectory: "/home/u")
                == "/x/state/bletransfer/spool")
        #expect(ResumeSpool.defaultInteractiveDirectory(environment: ["XDG_STATE_HOME": "relative"], homeDirectory: "/home/u")
                == "/home/u/.local/state/bletransfer/spool")
        #expect(ResumeSpool.defaultInteractiveDirectory(environment: [:], homeDirectory: "/h") == "/h/.local/state/bletransfer/spool")
    }
}

extension ResumeSpool {
    /// The bytes held for this message, in memory (empty: no entry, or one that cannot be
    /// read); what `heldPrefixFile` holds.
    fileprivate func heldPrefix(sender: PeerKey?, header: MessageHeader) -> [UInt8] {
        (try? heldPrefixFile(sender: sender, header: header).loadedBytes()) ?? []
    }
}
