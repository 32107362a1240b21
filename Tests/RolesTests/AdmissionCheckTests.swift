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

/// L-3: what the receiver asks its sink about room while a framed message arrives: once with
/// the announced length (the resume spool's copy counted when it shares the file system), then
/// the reserve before every write, not once per message.
@Suite struct AdmissionCheckTests {
    /// A sink that records what it is asked and refuses the write numbered `refusingWrite`.
    final class AskedSink: MessageSink {
        let refusingWrite: Int?
        let asked = Mutex<[String]>([])

        init(refusingWrite: Int? = nil) { self.refusingWrite = refusingWrite }

        func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? { nil }

        func admissionRefusal(announced: Int) -> StorageRefusal? {
            asked.withLock { $0.append("announced \(announced)") }
            return nil
        }

        func writeRefusal(announced: Int?, received: Int) -> StorageRefusal? {
            let count = asked.withLock { asked in
                asked.append("write \(received)/\(announced ?? -1)")
                return asked.filter { $0.hasPrefix("write") }.count
            }
            return count == refusingWrite ? StorageRefusal(bound: .reserve, reason: "the disk filled") : nil
        }
    }

    /// Feeds a keyless session's message of `length` bytes through the assembly, checking room
    /// after every value as the central does; returns the failure the check threw, if any.
    func receive(_ length: Int, into sink: AskedSink) throws -> (any Error)? {
        let hello = HelloV2(session: 9, offered: [.secure, .meta, .multi])
        let payload = randomBytes(length, seed: 7)
        var sender = try SecureSenderSession(
            identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello, payload: payload,
            digest: Array(SHA256.hash(data: payload)), metadata: nil, maximumValueLength: 244, wantsMulti: true)
        let receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 244)
        var assembly = MessageAssembly(limits: .default, sentHello: Hello(version: HelloV2.version, session: SessionID(rawValue: 9)),
                                       idleTimeout: .seconds(60), secure: receiver)
        var admission = AdmissionCheck()
        var time = Duration.zero
        while let value = sender.nextValue() {
            time += .milliseconds(1)
            let step = assembly.handle(.value(value), at: time)
            for write in assembly.takeWrites() { _ = try sender.receiveWrite(write.value) }
            do {
                try admission.check(assembly, at: time, sink: sink)
            } catch {
                return error
            }
            if case .complete = step { return nil }
        }
        return nil
    }

    @Test func theReserveIsAskedBeforeEveryWriteAfterTheAnnouncement() throws {
        let sink = AskedSink()
        #expect(try receive(5000, into: sink) == nil)
        let asked = sink.asked.withLock { $0 }
        #expect(asked.first == "announced 5000")
        #expect(asked.filter { $0 == "announced 5000" }.count == 1)
        // One question per DATA value after the HEADER: 5000 bytes in values of at most 244.
        let writes = asked.filter { $0.hasPrefix("write ") }
        #expect(writes.count >= 5000 / 244)
        #expect(writes.allSatisfy { $0.hasSuffix("/5000") })
    }

    @Test func aDiskThatFillsMidwayRefusesTheMessageAtTheNextWrite() throws {
        let sink = AskedSink(refusingWrite: 3)
        let failure = try #require(try receive(5000, into: sink))
        #expect("\(failure)".contains("the disk filled"))
        #expect(sink.asked.withLock { $0 }.filter { $0.hasPrefix("write ") }.count == 3)
    }

    /// The spool keeps a copy of a checkpointed message beside the one in the output directory:
    /// on one file system the message needs room for both.
    @Test func theSpoolsCopyIsCountedWhenItSharesTheFileSystem() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("admission-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: base) }
        let spool = try ResumeSpool(directory: base + "/spool")
        let announced = 1 << 30   // the spool keeps at most 256 MiB of it
        let plain = try OutputDirectorySink(path: FilePath(base + "/inbox"))
        let free = try #require(plain.directory.freeBytes())
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
