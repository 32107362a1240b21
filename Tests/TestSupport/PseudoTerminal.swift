import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A pseudo-terminal for tests of what a person types: the program under test reads `follower`
/// (a terminal: `isatty` is true, `tcflush` works), the test types into `leader`.
package final class PseudoTerminal: Sendable {
    package let leader: Int32
    package let follower: Int32

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    // The C library's pseudo-terminal calls, looked up at run time: Glibc's module leaves
    // them out (they need _XOPEN_SOURCE).
    private typealias OpenLeader = @convention(c) (Int32) -> Int32
    private typealias Prepare = @convention(c) (Int32) -> Int32
    private typealias FollowerName = @convention(c) (Int32, UnsafeMutablePointer<CChar>, Int) -> Int32

    private static func function<F>(_ name: String, as type: F.Type) throws -> F {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), name) else {
            throw Failure(description: "no \(name) in the C library")
        }
        return unsafeBitCast(symbol, to: type)
    }

    package init() throws {
        let openLeader = try Self.function("posix_openpt", as: OpenLeader.self)
        let grant = try Self.function("grantpt", as: Prepare.self)
        let unlock = try Self.function("unlockpt", as: Prepare.self)
        let followerName = try Self.function("ptsname_r", as: FollowerName.self)
        let leader = openLeader(O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard leader >= 0, grant(leader) == 0, unlock(leader) == 0 else {
            throw Failure(description: "cannot open a pseudo-terminal: \(String(cString: strerror(errno)))")
        }
        var name = [CChar](repeating: 0, count: 128)
        guard followerName(leader, &name, name.count) == 0 else {
            close(leader)
            throw Failure(description: "ptsname_r failed")
        }
        let follower = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard follower >= 0 else {
            close(leader)
            throw Failure(description: "cannot open the pseudo-terminal's follower")
        }
        self.leader = leader
        self.follower = follower
    }

    deinit {
        close(leader)
        close(follower)
    }

    /// Types `text` as a person would: it waits in the terminal's input until read.
    package func type(_ text: String) throws {
        let bytes = Array(text.utf8)
        guard bytes.withUnsafeBytes({ write(leader, $0.baseAddress, $0.count) }) == bytes.count else {
            throw Failure(description: "cannot type into the pseudo-terminal")
        }
    }

    /// Whether input is waiting to be read on the follower's side (typed, not yet read or flushed).
    package var hasPendingInput: Bool {
        var descriptor = pollfd(fd: follower, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, 0) > 0
    }
}

/// Reads `fd` until what came contains `text` or `limit` passes; returns what came. The reads
/// block, so they run on a thread of their own: the cooperative pool stays free for the code
/// under test, which writes what is read here.
package func readUntil(_ fd: Int32, contains text: String, within limit: Duration = .seconds(20)) async -> String {
    await withCheckedContinuation { (continuation: CheckedContinuation<String, Never>) in
        Thread.detachNewThread {
            var seen: [UInt8] = []
            let deadline = ContinuousClock.now + limit
            var buffer = [UInt8](repeating: 0, count: 4096)
            while ContinuousClock.now < deadline, !String(decoding: seen, as: UTF8.self).contains(text) {
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                guard poll(&descriptor, 1, 100) > 0 else { continue }
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count <= 0 { break }
                seen += buffer[0..<count]
            }
            continuation.resume(returning: String(decoding: seen, as: UTF8.self))
        }
    }
}
