import ArgumentParser
import DaemonSupport
import SystemCalls
import Foundation
import Machines
import Roles
import Storage
import Synchronization
import SystemPackage
import TestSupport
import Transfer
import Trust

/// A file of any size from disk to disk, as two bletransfer hosts move it: the sender's
/// session reads the file piece by piece, the central's reassembly writes a partial file in
/// the output directory and links it to its name once verified. The two sides run on two
/// threads joined by a local socket pair (one packet a value, writes going back), always
/// encrypted. Printed: MB/s against the same bytes copied file → socket pair → file in
/// value-sized packets, and the process's peak RSS (both sides together) before and after,
/// which stays flat whatever the size.
struct StreamBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stream",
        abstract: "A file from disk to disk over a local socket pair: MB/s against a plain copy, and peak RSS."
    )

    @Option(name: .customLong("size"), help: "File size in MiB.")
    var sizeInMiB: Int = 1024

    @Option(help: "Value length in bytes: 20 to 512 as over GATT; 513 to 8192 as over an L2CAP channel.")
    var valueLength: Int = 8192

    @Option(help: "Where the file and the output directory go (default: the temporary directory).")
    var directory: String = NSTemporaryDirectory()

    mutating func run() throws {
        guard sizeInMiB > 0 else { throw ValidationError("--size must be a positive number of MiB") }
        guard (20...8192).contains(valueLength) else { throw ValidationError("--value-length must be 20 to 8192") }
        let scratch = (directory as NSString).appendingPathComponent("bletransfer-stream-\(getpid())")
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let size = sizeInMiB * 1024 * 1024
        let source = scratch + "/source.bin"
        try Self.writeSeededFile(source, size: size)
        print("Stream benchmark: a \(sizeInMiB) MiB file, \(valueLength)-byte values over a socket pair; MB = 10^6 bytes")
        let before = Self.peakResidentKiB()

        let copySeconds = try ContinuousClock().measure {
            try Self.copy(source, to: scratch + "/copy.bin", valueLength: valueLength)
        }.seconds
        let afterCopy = Self.peakResidentKiB()
        try FileManager.default.removeItem(atPath: scratch + "/copy.bin")

        let inbox = try OutputDirectory(path: FilePath(scratch + "/inbox"))
        var stored = ""
        let sessionSeconds = try ContinuousClock().measure {
            stored = try Self.transfer(source, into: inbox, valueLength: valueLength)
        }.seconds
        let afterSession = Self.peakResidentKiB()
        guard try Self.sameContents(source, stored) else {
            throw ValidationError("the stored file differs from the one sent")
        }

        printRates([("baseline: file → socket pair → file", copySeconds),
                    ("framed, encrypted: sender session → partial file, link", sessionSeconds)], size: size, nameWidth: 58)
        print("\npeak RSS of the process (both sides), MiB:")
        print("  " + pad("before (file written)", 40) + pad(format(Double(before) / 1024, digits: 1), 8, right: true))
        print("  " + pad("after the copy baseline", 40) + pad(format(Double(afterCopy) / 1024, digits: 1), 8, right: true))
        print("  " + pad("after the framed transfer", 40) + pad(format(Double(afterSession) / 1024, digits: 1), 8, right: true))
        print("  " + pad("growth over the transfer ÷ file size", 40)
              + pad(format(Double(afterSession - afterCopy) / Double(size / 1024), digits: 4), 8, right: true))
    }

    /// The process's peak resident set so far, in KiB (`ru_maxrss`).
    static func peakResidentKiB() -> Int {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return usage.ru_maxrss
    }

    static func writeSeededFile(_ path: String, size: Int) throws {
        let fd = try FileDescriptor.open(FilePath(path), .writeOnly, options: [.create, .truncate], permissions: .ownerReadWrite)
        defer { try? fd.close() }
        var generator = SeededGenerator(seed: UInt64(size))
        var piece = [UInt8](repeating: 0, count: 1 << 20)
        var written = 0
        while written < size {
            let count = min(piece.count, size - written)
            for index in 0..<count { piece[index] = UInt8(truncatingIfNeeded: generator.next()) }
            _ = try fd.writeAll(piece[0..<count])
            written += count
        }
    }

    static func sameContents(_ first: String, _ second: String) throws -> Bool {
        let a = try FileDescriptor.open(FilePath(first), .readOnly)
        let b = try FileDescriptor.open(FilePath(second), .readOnly)
        defer { try? a.close(); try? b.close() }
        var left = [UInt8](repeating: 0, count: 1 << 20), right = left
        while true {
            let got = try left.withUnsafeMutableBytes { try a.read(into: $0) }
            let other = try right.withUnsafeMutableBytes { try b.read(into: $0) }
            guard got == other else { return false }
            if got == 0 { return true }
            guard left[0..<got] == right[0..<got] else { return false }
        }
    }

    /// A connected pair of packet sockets: what one side sends, the other receives whole.
    static func socketPair() throws -> (Int32, Int32) {
        var fds: [Int32] = [0, 0]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw Errno(rawValue: errno)
        }
        return (fds[0], fds[1])
    }

    static func send(_ fd: Int32, _ value: [UInt8]) throws {
        let sent = value.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == value.count else { throw Errno(rawValue: errno) }
    }

    /// The next packet; nil when the peer closed, or (with `waiting` false) when none is queued.
    static func receive(_ fd: Int32, waiting: Bool = true) throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: 8192 + 64)
        let got = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, waiting ? 0 : Int32(MSG_DONTWAIT)) }
        if got < 0 {
            if !waiting && (errno == EAGAIN || errno == EWOULDBLOCK) { return nil }
            throw Errno(rawValue: errno)
        }
        if got == 0 { return nil }
        return Array(buffer[0..<got])
    }

    /// Runs `first` and `second` on two threads; the first error either throws.
    static func onTwoThreads(_ first: @escaping @Sendable () throws -> Void,
                             _ second: @escaping @Sendable () throws -> Void) throws {
        let failure = Mutex<String?>(nil)
        let group = DispatchGroup()
        for body in [first, second] {
            DispatchQueue.global().async(group: group) {
                do { try body() } catch { failure.withLock { $0 = $0 ?? "\(error)" } }
            }
        }
        group.wait()
        if let failure = failure.withLock({ $0 }) { throw ValidationError(failure) }
    }

    /// The baseline: the file read in 1 MiB pieces, sent in value-sized packets, written out.
    static func copy(_ source: String, to target: String, valueLength: Int) throws {
        let (left, right) = try socketPair()
        defer { close(left); close(right) }
        try onTwoThreads({
            let input = try FileDescriptor.open(FilePath(source), .readOnly)
            defer { try? input.close() }
            var piece = [UInt8](repeating: 0, count: 1 << 20)
            while true {
                let got = try piece.withUnsafeMutableBytes { try input.read(into: $0) }
                if got == 0 { break }
                var offset = 0
                while offset < got {
                    let end = min(got, offset + valueLength)
                    try send(left, Array(piece[offset..<end]))
                    offset = end
                }
            }
            shutdown(left, Int32(SHUT_WR))
        }, {
            let output = try FileDescriptor.open(FilePath(target), .writeOnly, options: [.create, .truncate],
                                                 permissions: .ownerReadWrite)
            defer { try? output.close() }
            while let value = try receive(right) { _ = try output.writeAll(value) }
            guard fsync(output.rawValue) == 0 else { throw Errno(rawValue: errno) }
        })
    }

    /// The framed protocol between a keyless sender and central, file to partial file; returns
    /// where the message was stored.
    static func transfer(_ source: String, into inbox: OutputDirectory, valueLength: Int) throws -> String {
        let (message, _) = try OutgoingMessage.ofFile(at: source)
        let overChannel = valueLength > 512
        var offered: Capabilities = [.secure, .meta, .window]
        if overChannel { offered.insert(.channel) }
        let hello = HelloV2(session: 7, offered: offered)
        let (peripheralSide, centralSide) = try socketPair()
        defer { close(peripheralSide); close(centralSide) }
        let stored = Mutex<String?>(nil)
        try onTwoThreads({
            var session = try SecureSenderSession(
                identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello, payload: message.body,
                digest: message.digest, metadata: nil, maximumValueLength: valueLength, overChannel: overChannel)
            func take(_ write: [UInt8]) throws -> Bool {
                for event in try session.receiveWrite(write) {
                    if case .acknowledged = event { return true }
                    if case .refusedByCentral(let outcome) = event { throw ValidationError("refused: \(outcome)") }
                }
                return false
            }
            while true {
                while let value = session.nextValue() {
                    try send(peripheralSide, value)
                    while let write = try receive(peripheralSide, waiting: false) {
                        if try take(write) { return }
                    }
                }
                // This thread is the benchmark's own: it reads the file itself.
                if let wanted = session.payloadWanted {
                    session.providePayload(try message.body.bytes(in: wanted), at: wanted.lowerBound)
                    continue
                }
                if let failure = session.localFailure { throw failure }
                guard let write = try receive(peripheralSide) else { throw ValidationError("the central went away") }
                if try take(write) { return }
            }
        }, {
            let receiver = SecureReceiverSession(
                identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                maximumPayloadLength: Int.max, maximumWriteLength: valueLength)
            let partialFiles = inbox.partialFiles(from: 0)
            var file: PayloadFile?
            var assembly = MessageAssembly(
                limits: .default, idleTimeout: .seconds(3600), secure: receiver)
            var time = Duration.zero
            while let value = try receive(centralSide) {
                time += .microseconds(1)
                let step = assembly.handle(.value(value), at: time)
                // This thread is the benchmark's own: it may block on the partial file.
                for work in assembly.takePayloadWork() {
                    switch work {
                    case .begin(let header): file = try partialFiles.makePartialFile(length: header.payloadLength)
                    case .write(let offset, let bytes): try file?.write(bytes, at: offset)
                    }
                }
                for write in assembly.takeWrites() { try send(centralSide, write.value) }
                switch step {
                case .complete(let received, _):
                    guard let file else { throw ValidationError("no partial file") }
                    let path = try inbox.storeBlocking(MessagePayload(file: file, count: received.byteCount), baseName: "stored.bin")
                    stored.withLock { $0 = path.string }
                    for write in try assembly.secureAcknowledgement(alreadyStored: false) { try send(centralSide, write) }
                    return
                case .failed(let failure):
                    throw ValidationError("the central failed: \(failure)")
                case .proceed, .formatDetected, .sessionEnded:
                    continue
                }
            }
            throw ValidationError("the sender went away before the message was complete")
        })
        guard let path = stored.withLock({ $0 }) else { throw ValidationError("nothing was stored") }
        return path
    }
}
