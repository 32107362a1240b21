import Crypto
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Synchronization
import SystemPackage
import Testing
import TestSupport
import Transfer
import Trust

/// L-3: a message stored beside the resume spool's copy of it needs room for both (what the
/// visit asks about room is in MachinesTests' RoomQuestionTests).
@Suite struct AdmissionCheckTests {
    /// The spool keeps a copy of a checkpointed message beside the one in the output directory:
    /// on one file system the message needs room for both.
    @Test func theSpoolsCopyIsCountedWhenItSharesTheFileSystem() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("admission-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let spool = try ResumeSpool(directory: base + "/spool")
        let announced = 1 << 30   // the spool keeps at most 256 MiB of it
        let plain = try OutputDirectorySink(path: FilePath(base + "/inbox"))
        let free = try #require(plain.directory.freeSpace()?.bytes)
        try #require(free > announced + (512 << 20), "needs 1.5 GiB free on the temporary directory")
        // Room for the message and 128 MiB more, not for the spool's 256 MiB copy besides.
        let limits = StorageLimits(reserveBytes: free - announced - (128 << 20))
        let alone = try OutputDirectorySink(path: FilePath(base + "/inbox"), limits: limits)
        let spooled = try OutputDirectorySink(path: FilePath(base + "/inbox"), limits: limits, resumeSpool: spool)
        #expect(spooled.spooledCopy?.sameFileSystem == true)
        #expect(alone.admissionRefusal(announced: announced) == nil)
        let refusal = try #require(spooled.admissionRefusal(announced: announced))
        #expect(refusal.bound == .reserve && refusal.reason.contains("resume spool's copy"))
        // Short messages keep no checkpoint: nothing more is counted for them.
        #expect(spooled.spooledCopy?.bytes(announced: 1000) == 0)
        // Most of it received: what is left (and the spool's rest) fits again.
        #expect(spooled.writeRefusal(announced: announced, received: announced - (64 << 20)) == nil)
        #expect(spooled.writeRefusal(announced: announced, received: 0) != nil)
    }
}
