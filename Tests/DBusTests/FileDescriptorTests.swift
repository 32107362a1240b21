import DBus
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Unix fds through the bus: the receiver reads data written into the sender's pipe.
@Suite struct FileDescriptorTests {
    func makePipe() -> (read: UnixFileDescriptor, write: UnixFileDescriptor) {
        var ends: [Int32] = [0, 0]
        precondition(pipe(&ends) == 0)
        return (UnixFileDescriptor(owning: ends[0]), UnixFileDescriptor(owning: ends[1]))
    }

    static func readAll(_ fd: Int32) -> [UInt8] {
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count <= 0 { break }
            result += buffer.prefix(count)
        }
        return result
    }

    /// A fixture whose server exports `method` on org.example.Pipe at /pipe.
    static func start(exportingPipe method: DBusMethod) async throws -> BusFixture {
        try await BusFixture.start { try $0.export([DBusInterface(name: "org.example.Pipe", methods: [method])], at: "/pipe") }
    }

    @Test func sendAnFdAndReadThroughTheReceivedOne() async throws {
        let fixture = try await Self.start(exportingPipe: DBusMethod(name: "Drain", in: "h", out: "ay") { call in
            let fd = call.arguments[0].unixFD!
            defer { fd.close() }
            return [.bytes(FileDescriptorTests.readAll(fd.rawValue!))]
        })
        defer { fixture.stop() }
        let (readEnd, writeEnd) = makePipe()
        let payload = Array("bytes through a passed fd".utf8)
        #expect(write(writeEnd.rawValue!, payload, payload.count) == payload.count)
        writeEnd.close()  // end of data for the reader
        let reply = try await fixture.call("/pipe", "org.example.Pipe", "Drain", [.unixFD(readEnd)])
        #expect(reply.first?.bytes == payload)
        #expect(readEnd.rawValue != nil)  // sending dups: the caller still owns its fd
    }

    @Test func receiveAnFdInAReply() async throws {
        let payload = Array("written by the server".utf8)
        let fixture = try await Self.start(exportingPipe: DBusMethod(name: "Open", out: "h") { _ in
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw DBusError.failed("pipe") }
            let readEnd = UnixFileDescriptor(owning: ends[0])
            _ = write(ends[1], payload, payload.count)
            close(ends[1])
            return [.unixFD(readEnd)]  // dropped after the reply is built: its fd closes
        })
        defer { fixture.stop() }
        let reply = try await fixture.call("/pipe", "org.example.Pipe", "Open")
        let fd = try #require(reply.first?.unixFD)
        #expect(Self.readAll(fd.rawValue!) == payload)
        fd.close()
    }

    @Test func fdsInsideContainersAndVariants() async throws {
        let fixture = try await Self.start(exportingPipe: DBusMethod(name: "Count", in: "a{sv}", out: "u") { call in
            let dict = call.arguments[0].vardict ?? [:]
            let fds = dict.values.compactMap(\.unixFD)
            return [.uint32(UInt32(fds.filter { fcntl($0.rawValue!, F_GETFD) != -1 }.count))]
        })
        defer { fixture.stop() }
        let first = makePipe()
        let second = makePipe()
        let reply = try await fixture.call(
            "/pipe", "org.example.Pipe", "Count",
            [.vardict(["a": .unixFD(first.read), "b": .unixFD(second.write), "c": .string("x")])])
        #expect(reply == [.uint32(2)])
    }
}
