#if canImport(Glibc)
import Glibc
import Reactor
import SystemPackage

/// Watches one directory through inotify and signals a `ChangeSignal` whenever a file in it is created, finished
/// writing, moved in, or changes attributes, or the directory itself goes. Files leaving (moved out, removed) are not
/// reported: a departure never makes a file ready to send, and the outbox's own moves to `sent/` must not make it
/// list the directory again. The descriptor is a lasting interest on the process's reactor, read on its thread when
/// ready, so nothing polls and no thread blocks.
final class DirectoryWatcher: Sendable {
    private let interest: PersistentInterest
    private let fd: Int32

    /// Starts watching; nil without inotify (no kernel support, or the per-user instance or watch limit reached):
    /// callers then rescan on a timer. `completed` hears the names of files moved in or closed after writing.
    /// `followsName: false`: `directory` is a `/proc/self/fd/N` link, leading to the directory held whatever its name
    /// leads to now (followed to be watched); a plain path is watched without following a final symbolic link.
    init?(directory: String, signal: ChangeSignal, completed: CompletedNames? = nil, followsName: Bool = true) {
        let fd = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard fd >= 0 else { return nil }
        let mask = UInt32(IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO | IN_ATTRIB
            | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR) | (followsName ? UInt32(IN_DONT_FOLLOW) : 0)
        guard inotify_add_watch(fd, directory, mask) >= 0, let reactor = try? Reactor.shared() else {
            close(fd)
            return nil
        }
        // Should epoll refuse the descriptor, the handler hears `.error` once: the drain finds
        // nothing and the reader rescans once; later changes then go unheard.
        interest = reactor.watch(fd: fd, events: .readable) { _ in
            // Drain the queue (an overflow also lands here) and let the reader rescan; names
            // moved in or closed after writing are complete and need not settle.
            var buffer = [UInt8](repeating: 0, count: 4096)
            let inotify = FileDescriptor(rawValue: fd)
            // Non-blocking: EAGAIN (thrown) ends the drain, as does anything else.
            while let count = try? buffer.withUnsafeMutableBytes({ try inotify.read(into: $0) }), count > 0 {
                if let completed { Self.recordCompleted(buffer.prefix(count), into: completed) }
            }
            signal.signal()
        }
        self.fd = fd
    }

    // Closed on the reactor thread once the interest is gone: epoll never holds a closed
    // descriptor, and no drain reads a number that may since name another file.
    deinit { interest.cancel { [fd] in close(fd) } }

    /// The names of `IN_MOVED_TO` and `IN_CLOSE_WRITE` events (inotify_event: wd, mask, cookie, len, NUL-padded name).
    static func recordCompleted(_ events: ArraySlice<UInt8>, into completed: CompletedNames) {
        let bytes = Array(events)
        let now = FileTime.now()
        var offset = 0
        while offset + 16 <= bytes.count {
            func word(_ at: Int) -> UInt32 {
                bytes[offset + at ..< offset + at + 4].reversed().reduce(0) { $0 << 8 | UInt32($1) }
            }
            let mask = word(4)
            let length = Int(word(12))
            guard offset + 16 + length <= bytes.count else { return }
            if mask & UInt32(IN_MOVED_TO | IN_CLOSE_WRITE) != 0, length > 0 {
                let raw = bytes[offset + 16 ..< offset + 16 + length].prefix { $0 != 0 }
                completed.record(String(decoding: raw, as: UTF8.self), at: now)
            }
            offset += 16 + length
        }
    }
}
#endif
