import Crypto
import Foundation
import BlueZ
import Glibc
@testable import Machines
@testable import Roles
@testable import Storage
import Synchronization
import SystemPackage
import Testing
import Transfer
import Trust

/// How `send` reads its message: binary-safe, bounded, and with one-line failures.
@Suite struct PeripheralMessageInputTests {
    /// A scratch directory removed when the test ends.
    final class Scratch {
        let url: URL
        init() throws {
            url = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-input-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(at: url) }
        func file(_ name: String, _ bytes: [UInt8]) throws -> String {
            let path = url.appendingPathComponent(name).path
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    /// A pipe whose read end stands in for standard input, filled with `bytes` from a thread
    /// (a pipe holds only 64 KiB) and closed.
    static func pipe(carrying bytes: [UInt8]) throws -> FileDescriptor {
        // A reader that stops early (input over the limit) closes its end; the writer then
        // gets EPIPE instead of a SIGPIPE that would end the test runner.
        _ = Glibc.signal(SIGPIPE, SIG_IGN)
        let (read, write) = try FileDescriptor.pipe()
        Thread.detachNewThread {
            _ = try? bytes.withUnsafeBytes { try write.writeAll($0) }
            try? write.close()
        }
        return read
    }

    static let binary: [UInt8] = (0..<70_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 8) } + [0, 0, 0xFF, 0x45, 0x4F, 0x4D]

    @Test func argumentIsSentAsItsUTF8Bytes() throws {
        let text = "grüße ✓ 𝄞"
        #expect(try MessageInput.argument(text).read(limit: 100, allowEmpty: false) == Array(text.utf8))
    }

    @Test func fileContentsArriveByteForByte() throws {
        let scratch = try Scratch()
        let path = try scratch.file("payload.bin", Self.binary)
        #expect(try MessageInput.file(path).read(limit: 1 << 20, allowEmpty: false) == Self.binary)
    }

    @Test func standardInputIsReadToItsEndBinarySafe() throws {
        let input = try Self.pipe(carrying: Self.binary)
        defer { try? input.close() }
        #expect(try MessageInput.standardInput.read(limit: 1 << 20, allowEmpty: false, standardInput: input) == Self.binary)
    }

    @Test func missingFileIsNoInput() throws {
        let scratch = try Scratch()
        let path = scratch.url.appendingPathComponent("absent.txt").path
        let failure = try #require(throws: MessageInput.Failure.self) {
            try MessageInput.file(path).read(limit: 100, allowEmpty: false)
        }
        #expect(failure.kind == .noInput)
        #expect(failure.userMessage.contains("no such file"))
        #expect(!failure.userMessage.contains("\n"))
    }

    @Test func directoryIsNoInput() throws {
        let scratch = try Scratch()
        let failure = try #require(throws: MessageInput.Failure.self) {
            try MessageInput.file(scratch.url.path).read(limit: 100, allowEmpty: false)
        }
        #expect(failure.kind == .noInput)
        #expect(failure.userMessage.contains("directory"))
    }

    @Test func unreadableFileIsNoInput() throws {
        guard getuid() != 0 else { return }   // root reads anything; nothing to check then
        let scratch = try Scratch()
        let path = try scratch.file("secret", [1, 2, 3])
        try FileManager.default.setAttributes([.posixPermissions: 0], ofItemAtPath: path)
        let failure = try #require(throws: MessageInput.Failure.self) {
            try MessageInput.file(path).read(limit: 100, allowEmpty: false)
        }
        #expect(failure.kind == .noInput)
    }

    @Test func aRegularFileOverTheMemoryLimitIsSentFromDisk() throws {
        let scratch = try Scratch()
        let bytes = [UInt8](repeating: 1, count: 101)
        let path = try scratch.file("big", bytes)
        let message = try MessageInput.file(path).readMessage(limit: 100, allowEmpty: false, sendsName: true)
        #expect(message.body.file != nil, "read piece by piece as it is sent, not into memory")
        #expect(message.byteCount == 101)
        #expect(message.payload == bytes)
        #expect(message.file?.name == "big")
    }

    /// `tar c dir | bletransfer send`: standard input of any size, held in an unnamed temporary
    /// file a piece at a time (constant memory) and sent from it as a file is; no 64 MiB cap.
    /// A 200 MiB stream, generated as it is read, arrives whole, with the digest of what was written.
    @Test(.timeLimit(.minutes(2)))
    func standardInputOfAnySizeIsHeldOnDiskNotInMemory() throws {
        _ = Glibc.signal(SIGPIPE, SIG_IGN)
        let (read, write) = try FileDescriptor.pipe()
        defer { try? read.close() }
        let size = 200 << 20
        let written = WrittenDigest()
        Thread.detachNewThread {
            var hasher = SHA256()
            var chunk = [UInt8](repeating: 0, count: 1 << 20)
            for index in 0..<(size >> 20) {
                for offset in stride(from: 0, to: chunk.count, by: 8) {
                    withUnsafeBytes(of: UInt64(index << 20 + offset).bigEndian) { chunk.replaceSubrange(offset..<offset + 8, with: $0) }
                }
                hasher.update(data: chunk)
                guard (try? chunk.withUnsafeBytes { try write.writeAll($0) }) != nil else { break }
            }
            written.set(Array(hasher.finalize()))
            try? write.close()
        }
        let message = try MessageInput.standardInput.readMessage(limit: 64 << 20, allowEmpty: false, sendsName: false,
                                                                  standardInput: read)
        #expect(message.byteCount == size)
        #expect(message.body.file != nil, "held in a file and read piece by piece as it is sent, not in memory")
        #expect(message.digest == written.value)
        #expect(try message.body.bytes(in: (size - 8)..<size) == withUnsafeBytes(of: UInt64(size - 8).bigEndian, Array.init))
        // The file has no name: nothing is left behind, however the run ends.
        let held = try #require(message.body.file)
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(held.descriptor)")
        #expect(target.hasSuffix(" (deleted)"), "\(target)")
    }

    final class WrittenDigest: Sendable {
        private let digest = Mutex<[UInt8]>([])
        func set(_ value: [UInt8]) { digest.withLock { $0 = value } }
        var value: [UInt8] { digest.withLock { $0 } }
    }

    @Test func anArgumentOverTheLimitIsADataError() throws {
        #expect(throws: MessageInput.Failure.self) {
            try MessageInput.argument("eleven char").read(limit: 10, allowEmpty: false)
        }
    }

    @Test func emptyMessageNeedsAllowEmpty() throws {
        let scratch = try Scratch()
        let path = try scratch.file("empty", [])
        let failure = try #require(throws: MessageInput.Failure.self) {
            try MessageInput.file(path).read(limit: 100, allowEmpty: false)
        }
        #expect(failure.kind == .dataError)
        #expect(failure.userMessage.contains("--allow-empty"))
        #expect(try MessageInput.file(path).read(limit: 100, allowEmpty: true) == [])
        #expect(try MessageInput.argument("").read(limit: 100, allowEmpty: true) == [])
        let input = try Self.pipe(carrying: [])
        defer { try? input.close() }
        #expect(throws: MessageInput.Failure.self) {
            try MessageInput.standardInput.read(limit: 100, allowEmpty: false, standardInput: input)
        }
    }

    @Test func advertisedNameRules() throws {
        #expect(try AdvertisedName.validate("bletransfer") == "bletransfer")
        #expect(try AdvertisedName.validate(String(repeating: "n", count: 29)).utf8.count == 29)
        #expect(throws: AdvertisedName.Invalid.self) { try AdvertisedName.validate(String(repeating: "n", count: 30)) }
        // 10 three-byte characters are 30 bytes: too long, although only 10 characters.
        #expect(throws: AdvertisedName.Invalid.self) { try AdvertisedName.validate(String(repeating: "✓", count: 10)) }
        #expect(throws: AdvertisedName.Invalid.self) { try AdvertisedName.validate("") }
        #expect(throws: AdvertisedName.Invalid.self) { try AdvertisedName.validate("tab\there") }
    }

    @Test func helloRegistryIsBoundedAndExpires() {
        var registry = HelloRegistry<DeviceReference>(capacity: 3, lifetime: .seconds(10))
        let start = ContinuousClock.now
        for index in 0..<5 {
            registry.record(.version2(HelloV2(session: UInt64(index), offered: [.secure])), from: .named("/dev\(index)"), at: start + .seconds(index))
        }
        #expect(registry.entries.count == 3)
        #expect(registry.hello(from: .named("/dev0"), at: start + .seconds(5)) == .none)   // evicted, the oldest
        #expect(registry.hello(from: .named("/dev4"), at: start + .seconds(5)).session == 4)
        #expect(registry.hello(from: .named("/dev4"), at: start + .seconds(15)) == .none)  // expired
        #expect(registry.mostRecent(at: start + .seconds(5))?.device == .named("/dev4"))
        registry.forget(.named("/dev4"))
        #expect(registry.hello(from: .named("/dev4"), at: start + .seconds(5)) == .none)
    }

    @Test func peerAddressFromDevicePath() {
        #expect(BluetoothAddress(deviceObjectPath: "/org/bluez/hci0/dev_AA_BB_CC_DD_EE_0F")?.description == "AA:BB:CC:DD:EE:0F")
        #expect(BluetoothAddress(deviceObjectPath: "/org/bluez/hci0") == nil)
        #expect(BluetoothAddress(deviceObjectPath: "/org/bluez/hci0/dev_AA_BB") == nil)
    }

    @Test func repeatingSourceServesCountTimes() async {
        let source = RepeatingMessageSource(message: OutgoingMessage(payload: [1]), count: 2)
        let summary = MessageSummary(sequence: 1, byteCount: 1, format: .compat)
        #expect(await source.current() != nil)
        await source.markDelivered(OutgoingMessage(payload: [1]), summary: summary, to: nil)
        #expect(await source.current() != nil)
        await source.markDelivered(OutgoingMessage(payload: [1]), summary: summary, to: nil)
        #expect(await source.current() == nil)
        let forever = RepeatingMessageSource(message: OutgoingMessage(payload: []), count: nil)
        for _ in 0..<100 { await forever.markDelivered(OutgoingMessage(payload: []), summary: summary, to: nil) }
        #expect(await forever.current() != nil)
    }
}

extension MessageInput {
    /// The whole message's bytes, named or not.
    func read(limit: Int, allowEmpty: Bool,
              standardInput: FileDescriptor = .standardInput) throws(Failure) -> [UInt8] {
        try readMessage(limit: limit, allowEmpty: allowEmpty, sendsName: false, standardInput: standardInput).payload
    }
}
