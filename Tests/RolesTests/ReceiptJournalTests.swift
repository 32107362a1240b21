import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Synchronization
import SystemPackage
import Testing
import Transfer
import TestSupport
import Trust

private func scratch(_ label: String) throws -> String {
    let directory = NSTemporaryDirectory() + "receipts-\(label)-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    return directory
}

private func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02x", $0) }.joined() }

/// What the receiver remembers across its own death: a message stored and not known to be
/// acknowledged is found again, one never stored is not taken for stored.
@Suite struct ReceiptJournalTests {
    @Test func aStoredMessageIsFoundByALaterRunAndForgottenOnceAcknowledged() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let (_, digest, stored) = try await storeTestMessage("hello", in: inbox, as: "a.txt")

        let first = ReceiptJournal(directory: inbox, stateDirectory: state)
        first.willStore(sender: "SHA256:k", digest: digest, size: 5, name: "a.txt", visit: "v1")
        first.stored(sender: "SHA256:k", digest: digest, visit: "v1", at: stored)
        // The same visit sending the same bytes again means a second message.
        #expect(first.earlierCopy(sender: "SHA256:k", digest: digest, size: 5, excludingVisit: "v1") == nil)

        // A new process (the receiver was killed): the entry is read back.
        let second = ReceiptJournal(directory: inbox, stateDirectory: state)
        #expect(second.earlierCopy(sender: "SHA256:k", digest: digest, size: 5, excludingVisit: "v2") == stored)
        #expect(second.earlierCopy(sender: "SHA256:other", digest: digest, size: 5, excludingVisit: "v2") == nil)
        second.forget(sender: "SHA256:k", digest: digest)
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).count == 0)
    }

    /// The same, through the calls async code makes (flushes on the storage threads).
    @Test func theAsyncCallsKeepTheSameRecord() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let (_, digest, stored) = try await storeTestMessage("hello", in: inbox, as: "a.txt")

        let first = ReceiptJournal(directory: inbox, stateDirectory: state)
        await first.recordWillStore(sender: "SHA256:k", digest: digest, size: 5, name: "a.txt", visit: "v1")
        // Flushed before the call returned: a new process reads it back.
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).all.first?.storedAt == nil)
        await first.recordStored(sender: "SHA256:k", digest: digest, visit: "v1", at: stored)
        #expect(await first.findEarlierCopy(sender: "SHA256:k", digest: digest, size: 5, excludingVisit: "v1") == nil)

        let second = ReceiptJournal(directory: inbox, stateDirectory: state)
        #expect(await second.findEarlierCopy(sender: "SHA256:k", digest: digest, size: 5, excludingVisit: "v2") == stored)
        await second.recordAcknowledged(sender: "SHA256:k", digest: digest)
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).all.first?.acknowledgedAt != nil)
        await second.recordForgotten(sender: "SHA256:k", digest: digest)
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).count == 0)
    }

    /// The sender read the ACK and was killed before it moved the file to sent/: after its
    /// restart it offers the file again, and the receiver still knows it stored it — until the
    /// retention after the acknowledgement has passed.
    @Test func anAcknowledgedMessageIsKeptForTheRetentionThenForgotten() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let (payload, digest, stored) = try await storeTestMessage("acknowledged", in: inbox, as: "b.txt")
        let now = Mutex<Double>(1_000_000)
        let clock: @Sendable () -> Double = { now.withLock { $0 } }
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state, retention: .seconds(600), clock: clock)
        journal.willStore(sender: "SHA256:k", digest: digest, size: payload.count, name: "b.txt", visit: "v1")
        journal.stored(sender: "SHA256:k", digest: digest, visit: "v1", at: stored)
        journal.acknowledged(sender: "SHA256:k", digest: digest)
        now.withLock { $0 += 300 }
        let restarted = ReceiptJournal(directory: inbox, stateDirectory: state, retention: .seconds(600), clock: clock)
        #expect(restarted.earlierCopy(sender: "SHA256:k", digest: digest, size: payload.count, excludingVisit: "v2") == stored)
        now.withLock { $0 += 400 }
        // Any change prunes what is past its retention.
        restarted.willStore(sender: "SHA256:k", digest: "00", size: 1, name: nil, visit: "v3")
        #expect(restarted.earlierCopy(sender: "SHA256:k", digest: digest, size: payload.count, excludingVisit: "v3") == nil)
        #expect(restarted.all.map(\.digest) == ["00"])
    }

    @Test func aReceiverKilledBetweenStoringAndNotingItFindsTheFileByItsDigest() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let payload = Array("the real one".utf8)
        let digest = hex(sha256(payload))
        let directory = try OutputDirectory(path: FilePath(inbox))
        // A file of the same name and size but other bytes was there before: passed over.
        _ = try await directory.store(Array("not the one!".utf8), baseName: "docs/b.txt")
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state)
        journal.willStore(sender: "00:11", digest: digest, size: payload.count, name: "docs/b.txt", visit: "v1")
        let stored = try await directory.store(payload, baseName: "docs/b.txt").string   // then killed
        #expect(stored.hasSuffix("/docs/b-1.txt"))

        let after = ReceiptJournal(directory: inbox, stateDirectory: state)
        #expect(after.earlierCopy(sender: "00:11", digest: digest, size: payload.count, excludingVisit: "v2") == stored)
        #expect(after.all.first?.storedAt == stored)
    }

    @Test func aMessageNeverStoredOrSinceRemovedIsStoredAgain() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let payload = Array("gone".utf8)
        let digest = hex(sha256(payload))
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state)
        // Killed before the file got its name.
        journal.willStore(sender: "k", digest: digest, size: 4, name: "c.txt", visit: "v1")
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state)
            .earlierCopy(sender: "k", digest: digest, size: 4, excludingVisit: "v2") == nil)
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).count == 0)

        // Stored, then taken away by the user before the sender came back.
        let stored = try await OutputDirectory(path: FilePath(inbox)).store(payload, baseName: "c.txt").string
        journal.willStore(sender: "k", digest: digest, size: 4, name: "c.txt", visit: "v3")
        journal.stored(sender: "k", digest: digest, visit: "v3", at: stored)
        try FileManager.default.removeItem(atPath: stored)
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state)
            .earlierCopy(sender: "k", digest: digest, size: 4, excludingVisit: "v4") == nil)
    }

    /// The log is replayed into what the journal held in memory, whatever happened: any mix of
    /// messages stored, acknowledged, forgotten and expired, across compactions.
    @Test(arguments: [1, 2, 3, 4])
    func aReopenedJournalHoldsWhatTheRunningOneHeld(seed: UInt64) throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        var random = SeededGenerator(seed: seed)
        let now = Mutex<Double>(1_000_000)
        let clock: @Sendable () -> Double = { now.withLock { $0 } }
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state, retention: .seconds(600), clock: clock)
        var made: [(digest: String, visit: String)] = []
        for step in 0..<1_500 {
            let visit = "v\(step / 50)"
            switch Int.random(in: 0..<10, using: &random) {
            case 0..<4:
                let digest = String(Int.random(in: 0..<400, using: &random))
                journal.willStore(sender: "k", digest: digest, size: 1, name: "f\(digest)", visit: visit)
                made.append((digest, visit))
            case 4..<6:
                if let pick = made.randomElement(using: &random) {
                    journal.stored(sender: "k", digest: pick.digest, visit: pick.visit, at: "\(inbox)/f\(pick.digest)")
                }
            case 6..<8:
                if let pick = made.randomElement(using: &random) { journal.acknowledged(sender: "k", digest: pick.digest) }
            case 8:
                if let pick = made.randomElement(using: &random) { journal.forget(sender: "k", digest: pick.digest) }
            default:
                now.withLock { $0 += Double.random(in: 0..<120, using: &random) }
            }
            if step % 97 == 0 || step == 1_499 {
                let reopened = ReceiptJournal(directory: inbox, stateDirectory: state, retention: .seconds(600), clock: clock)
                #expect(reopened.all == journal.all, "step \(step)")
            }
        }
        // Compacted as it went: the log stays within a few lines per entry.
        let log = FileManager.default.enumerator(atPath: state)?.compactMap { $0 as? String }.first { $0.hasPrefix("receipts-") }
        let text = log.flatMap { try? String(contentsOfFile: state + "/" + $0, encoding: .utf8) } ?? ""
        #expect(text.split(separator: "\n").count <= 4 * journal.count + 256)
    }

    /// A line cut short by a crash (the process killed in the middle of an append) costs that
    /// line only.
    @Test func aLineCutShortIsSkipped() throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state)
        journal.willStore(sender: "k", digest: "aa", size: 1, name: "a", visit: "v1")
        journal.stored(sender: "k", digest: "aa", visit: "v1", at: inbox + "/a")
        let handle = try #require(FileHandle(forWritingAtPath: journal.path))
        handle.seekToEndOfFile()
        handle.write(Data("{\"entry\":{\"id\":1,\"sender\":\"k\",\"dig".utf8))
        handle.closeFile()
        let reopened = ReceiptJournal(directory: inbox, stateDirectory: state)
        #expect(reopened.all == journal.all)
        // And the log goes on from there: the next entry is read back after the torn line.
        reopened.willStore(sender: "k", digest: "bb", size: 1, name: "b", visit: "v2")
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).all.map(\.digest) == ["aa", "bb"])
    }

    @Test("a line whose id is out of range (an edited log) is skipped; the log goes on", arguments: [Int.max, -1])
    func anIdOutOfRangeIsSkipped(id: Int) throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state)
        journal.willStore(sender: "k", digest: "aa", size: 1, name: "a", visit: "v1")
        let handle = try #require(FileHandle(forWritingAtPath: journal.path))
        handle.seekToEndOfFile()
        handle.write(Data("{\"entry\":{\"id\":\(id),\"sender\":\"k\",\"digest\":\"zz\",\"size\":1,\"visit\":\"v0\"}}\n".utf8))
        handle.closeFile()
        let reopened = ReceiptJournal(directory: inbox, stateDirectory: state)
        #expect(reopened.all.map(\.digest) == ["aa"])
        reopened.willStore(sender: "k", digest: "bb", size: 1, name: "b", visit: "v2")
        let again = ReceiptJournal(directory: inbox, stateDirectory: state).all
        #expect(again.map(\.digest) == ["aa", "bb"])
        #expect(again.map(\.id) == [0, 1])
    }

    @Test func theJournalIsBounded() throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        let journal = ReceiptJournal(directory: inbox, stateDirectory: state)
        for index in 0..<(ReceiptJournal.capacity + 10) {
            journal.willStore(sender: "k", digest: String(index), size: 1, name: nil, visit: "v")
        }
        #expect(ReceiptJournal(directory: inbox, stateDirectory: state).count == ReceiptJournal.capacity)
    }
}

/// A sink that stores the message and then dies, as a receiver killed after the file got its
/// name and before the ACK was written.
private struct DyingAfterStoringSink: MessageSink {
    let inner: OutputDirectorySink
    func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        _ = try await inner.store(message, sequence: sequence, from: peer)
        throw SinkFailure(.ioError, "killed after storing")
    }
}

@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(3)))
struct ExactlyOnceAcrossReceiverRunsTests {
    @Test("a receiver killed after storing and before its ACK: the next run acknowledges the message sent again, one file")
    func aMessageSentAgainAfterTheReceiverDiedIsNotStoredTwice() async throws {
        let inbox = try scratch("inbox"), state = try scratch("state")
        defer { for d in [inbox, state] { try? FileManager.default.removeItem(atPath: d) } }
        // The second run on another adapter: BlueZoo does not let the sender tell a reconnecting
        // central from the one that died; the receiver's key, which the journal goes by, is the same.
        let bus = try await BlueZooBus.start(adapters: 3)
        defer { bus.stop() }
        let payload = CentralTestData.binary(3000)
        let message = OutgoingMessage(payload: payload, file: SentFileAttributes(
            name: "report.bin", modificationSeconds: 1_700_000_000, modificationNanoseconds: 0))
        let source = RepeatingMessageSource(message: message, count: 1)
        let (senderSession, _, sending) = try await SecureEndToEndBlueZooTests.startSender(
            on: bus, secureMode: SecureEndToEndBlueZooTests.policy(SecureEndToEndBlueZooTests.senderKey,
                                                                  trusting: SecureEndToEndBlueZooTests.receiverKey),
            source: source)
        defer { senderSession.close() }

        func receiverRun(_ sink: any MessageSink, adapter: String) async throws -> (Int, RoleFailure?) {
            var configuration = CentralTestData.configuration(count: 1, adapter: adapter)
            configuration.secureMode = SecureEndToEndBlueZooTests.policy(SecureEndToEndBlueZooTests.receiverKey,
                                                                         trusting: SecureEndToEndBlueZooTests.senderKey)
            configuration.receiptJournal = ReceiptJournal(directory: inbox, stateDirectory: state)
            let (session, central, _) = try await SecureEndToEndBlueZooTests.receiver(on: bus, configuration)
            defer { session.close() }
            do {
                return (try await central.run(sink: sink, timeout: .seconds(60)), nil)
            } catch let failure as RoleFailure {
                return (0, failure)
            } catch let failure as SinkFailure {
                return (0, RoleFailure(failure.kind, failure.userMessage))
            }
        }

        let sink = try OutputDirectorySink(path: FilePath(inbox))
        let (_, death) = try await receiverRun(DyingAfterStoringSink(inner: sink), adapter: "hci1")
        #expect(death != nil)
        #expect(try FileManager.default.contentsOfDirectory(atPath: inbox) == ["report.bin"])
        #expect(await source.deliveredCount == 0)

        // The next run of the receiver: the sender offers the message again.
        let (received, failure) = try await receiverRun(try OutputDirectorySink(path: FilePath(inbox)), adapter: "hci2")
        #expect(failure == nil && received == 1, "\(String(describing: failure)), \(received)")
        #expect(await value(of: sending, within: .seconds(60)) == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: inbox) == ["report.bin"])
        // Acknowledged and seen: kept only for the retention (a sender killed before its move
        // to sent/ offers it again), marked so.
        let kept = ReceiptJournal(directory: inbox, stateDirectory: state).all
        #expect(kept.count == 1 && kept.allSatisfy { $0.acknowledgedAt != nil }, "\(kept)")
    }
}
