import Foundation
import Synchronization
import Glibc
@testable import Machines
@testable import Storage
import SystemPackage
import Testing
import TestSupport
import Transfer

/// `bletransfer receive | tar x` and `receive -o FILE` for a message of any size: a framed
/// message comes into a partial file (the holding directory's, unnamed; or one beside the
/// target) and is copied or renamed out once verified, in constant memory.
@Suite struct StreamedSinksTests {
    /// A message as the central hands it over: its bytes in a partial file of `store`.
    func arrived(_ bytes: [UInt8], into store: any PartialPayloadStore) throws -> ReceivedMessage {
        let file = try #require(try store.makePartialFile(length: UInt64(bytes.count)))
        try file.write(bytes, at: 0)
        return ReceivedMessage(body: MessagePayload(file: file, count: bytes.count), format: .secure)
    }

    @Test func standardOutputGetsALargeMessageFromItsFileExactly() async throws {
        let sinkPipe = try FileDescriptor.pipe()
        let sink = FileDescriptorSink(fileDescriptor: sinkPipe.writeEnd.rawValue, escapesForTerminal: false)
        let bytes = randomBytes(3 << 20, seed: 11)
        let store = try #require(sink.partialPayloadStore)
        #expect(try store.makePartialFile(length: 1000) == nil, "small messages stay in memory")
        let message = try arrived(bytes, into: store)
        // The partial file has no name: nothing is left if the run ends midway.
        let target = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(try #require(message.body.file).descriptor)")
        #expect(target.hasSuffix(" (deleted)"))
        // The reader blocks until the end of file: on a thread of its own, never the pool's
        // (the test, which closes the write end, needs a pool thread to go on).
        let readEnd = sinkPipe.readEnd
        let reading = Mutex<[UInt8]>([])
        let finished = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while let count = try? buffer.withUnsafeMutableBytes({ try readEnd.read(into: $0) }), count > 0 {
                reading.withLock { $0 += buffer[0..<count] }
            }
            finished.signal()
        }
        _ = try await sink.store(message, sequence: 1, from: nil)
        try sinkPipe.writeEnd.close()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().async {
                finished.wait()
                continuation.resume()
            }
        }
        #expect(reading.withLock { $0 } == bytes)
        try readEnd.close()
    }

    @Test func aTerminalGetsWholeCharactersAcrossPieces() {
        let text = Array("é✓𝄞".utf8)   // 2, 3 and 4 bytes
        for cut in 0...text.count {
            let (whole, rest) = FileDescriptorSink.splitAtCharacterBoundary(Array(text[..<cut]), final: false)
            #expect(String(validating: whole, as: UTF8.self) != nil, "cut at \(cut)")
            #expect(whole + rest == Array(text[..<cut]))
            #expect(rest.count < 4)
        }
        #expect(FileDescriptorSink.splitAtCharacterBoundary([0xC3], final: true) == ([0xC3], []))
    }

    @Test func anOutputFileTakesTheMessageByRenameNotCopy() async throws {
        let directory = NSTemporaryDirectory() + "single-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let target = directory + "/big.bin"
        try Data("old".utf8).write(to: URL(fileURLWithPath: target))
        let sink = try SingleFileSink(path: FilePath(target))
        let bytes = randomBytes(1 << 20, seed: 12)
        let message = try arrived(bytes, into: try #require(sink.partialPayloadStore))
        let partial = try #require(message.body.file)
        var before = stat()
        #expect(fstat(partial.descriptor, &before) == 0)
        _ = try await sink.store(message, sequence: 1, from: nil)
        var after = stat()
        #expect(stat(target, &after) == 0)
        #expect(after.st_ino == before.st_ino, "the partial file itself became the target")
        #expect([UInt8](try Data(contentsOf: URL(fileURLWithPath: target))) == bytes)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory) == ["big.bin"])
    }
}
