import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Storage
import SystemPackage
import Testing
import Transfer
import TestSupport
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// File names travelling with files between our Peripheral (hci0) and our Central (hci1) over
/// BlueZoo: in the secure mode a named message is stored under its name with its modification
/// time; without a name, or in framed version 1, the receiver generates one as before.
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(3)))
struct SecureFileNamesBlueZooTests {
    static let senderKey = HostIdentity(name: "sender-host")
    static let receiverKey = HostIdentity(name: "receiver-host")

    static func peers(_ identity: HostIdentity) -> AuthorizedPeers { .listing(identity) }

    static let senderPolicy = SecureModePolicy(identity: senderKey, authorizedPeers: peers(receiverKey), requiresSecure: true)
    static let receiverPolicy = SecureModePolicy(identity: receiverKey, authorizedPeers: peers(senderKey), requiresSecure: false)

    struct Run {
        var storedPaths: [String]
        var summaries: [MessageSummary]
        var directory: FilePath
    }

    /// One delivery of `message` into a fresh output directory.
    static func exchange(_ message: OutgoingMessage, sender: SecureModePolicy?,
                         receiver: SecureModePolicy? = receiverPolicy) async throws -> Run {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let directory = FilePath(FileManager.default.temporaryDirectory.appendingPathComponent("names-e2e-\(UUID().uuidString)").path)

        let senderSession = try await bus.openSession()
        defer { senderSession.close() }
        var senderConfiguration = PeripheralConfiguration(adapterName: "hci0", fallbackValueInterval: .zero)
        senderConfiguration.secureMode = sender ?? .unauthenticated()
        let peripheral = Peripheral(configuration: senderConfiguration, session: senderSession)
        let sending = Task { try await peripheral.run(source: RepeatingMessageSource(message: message, count: 1)) }

        let receiverSession = try await bus.openSession()
        defer { receiverSession.close() }
        var receiverConfiguration = CentralTestData.configuration(adapter: "hci1")
        receiverConfiguration.secureMode = receiver ?? .unauthenticated()
        let central = Central(configuration: receiverConfiguration, session: receiverSession)
        let receiverLog = PeripheralEventLog(following: central.events)
        let sink = try OutputDirectorySink(path: directory)
        let received = try await central.run(sink: sink, timeout: .seconds(60))
        #expect(received == 1)
        #expect(await value(of: sending, within: .seconds(60)) == 1)
        var paths: [String] = []
        var summaries: [MessageSummary] = []
        for event in await receiverLog.allWhenFinished() {
            if case .received(let summary, _, let storedAt) = event {
                summaries.append(summary)
                if let storedAt { paths.append(storedAt) }
            }
        }
        return Run(storedPaths: paths, summaries: summaries, directory: directory)
    }

    static func modificationTime(_ path: String) -> timespec {
        var status = stat()
        _ = stat(path, &status)
        return status.st_mtim
    }

    static let photo = SentFileAttributes(name: "photo.jpg", modificationSeconds: 1_600_000_000,
                                          modificationNanoseconds: 123_456_789)

    @Test("photo.jpg arrives as photo.jpg with its modification time; the event names it")
    func namedFileKeepsItsName() async throws {
        let bytes = CentralTestData.binary(5000)
        let run = try await Self.exchange(OutgoingMessage(payload: bytes, file: Self.photo), sender: Self.senderPolicy)
        defer { try? FileManager.default.removeItem(atPath: run.directory.string) }
        let expected = run.directory.appending("photo.jpg").string
        #expect(run.storedPaths == [expected])
        #expect(FileManager.default.contents(atPath: expected) == Data(bytes))
        let time = Self.modificationTime(expected)
        #expect(time.tv_sec == 1_600_000_000 && time.tv_nsec == 123_456_789)
        #expect(run.summaries.map(\.fileName) == ["photo.jpg"])
        #expect(run.summaries.map(\.format) == [.secure])
    }

    @Test("a hostile name arrives sanitized, inside the directory")
    func hostileNameIsSanitized() async throws {
        let hostile = SentFileAttributes(name: "..\u{1B}[2J\u{202E}gpj.exe", modificationSeconds: 1_600_000_000,
                                         modificationNanoseconds: 0)
        let run = try await Self.exchange(OutgoingMessage(payload: Array("x".utf8), file: hostile), sender: Self.senderPolicy)
        defer { try? FileManager.default.removeItem(atPath: run.directory.string) }
        #expect(run.storedPaths == [run.directory.appending("_[2J_gpj.exe").string])
        #expect(run.summaries.map(\.fileName) == [hostile.name])
    }

    @Test("without a name (send --no-name, a message from an argument) the name is generated")
    func unnamedMessageGetsAGeneratedName() async throws {
        let run = try await Self.exchange(OutgoingMessage(payload: Array("no name".utf8)), sender: Self.senderPolicy)
        defer { try? FileManager.default.removeItem(atPath: run.directory.string) }
        let name = run.storedPaths.first.flatMap { FilePath($0).lastComponent?.string } ?? ""
        #expect(name.hasPrefix("message-") && name.hasSuffix(".txt"), "\(name)")
        #expect(run.summaries.map(\.fileName) == [nil])
    }

    @Test("without keys on the sender, the encrypted session carries the name, the sender's key unlisted")
    func keylessSenderCarriesTheName() async throws {
        let run = try await Self.exchange(OutgoingMessage(payload: Array("plain".utf8), file: Self.photo), sender: nil)
        defer { try? FileManager.default.removeItem(atPath: run.directory.string) }
        #expect(run.storedPaths == [run.directory.appending("photo.jpg").string])
        #expect(run.summaries.map(\.format) == [.secure])
        #expect(run.summaries.map(\.fileName) == ["photo.jpg"])
        #expect(run.summaries.map { $0.peerKey?.isListed } == [false])
    }

    @Test("two hosts without keys: the encrypted session carries the name and the mtime")
    func keylessHostsKeepNames() async throws {
        let run = try await Self.exchange(OutgoingMessage(payload: Array("no keys".utf8), file: Self.photo),
                                          sender: nil, receiver: nil)
        defer { try? FileManager.default.removeItem(atPath: run.directory.string) }
        let stored = run.directory.appending("photo.jpg").string
        #expect(run.storedPaths == [stored])
        #expect(FileManager.default.contents(atPath: stored) == Data("no keys".utf8))
        let modified = try FileManager.default.attributesOfItem(atPath: stored)[.modificationDate] as? Date
        #expect(modified.map { Int($0.timeIntervalSince1970) } == Int(Self.photo.modificationSeconds))
        #expect(run.summaries.map(\.format) == [.secure])
        #expect(run.summaries.map(\.fileName) == ["photo.jpg"])
    }
}
