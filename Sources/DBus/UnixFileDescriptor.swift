import Synchronization
import SystemPackage

/// Owns one open file descriptor and closes it on deinit, unless ownership was taken. Received `h` values arrive as
/// one. To send an fd, wrap a dup of it: the message dups again while built, so the value still closes its fd.
package final class UnixFileDescriptor: Sendable, Hashable {
    private let state: Mutex<Int32?>

    package init(owning fd: Int32) {
        state = Mutex(fd >= 0 ? fd : nil)
    }

    deinit { close() }

    /// The fd, or nil once taken or closed.
    package var rawValue: Int32? { state.withLock { $0 } }

    /// Hands the fd to the caller, who must close it; this value will not.
    package func take() -> Int32? {
        state.withLock { fd in
            defer { fd = nil }
            return fd
        }
    }

    /// Closes the fd. Idempotent.
    package func close() {
        if let fd = take() {
            try? FileDescriptor(rawValue: fd).close()
        }
    }

    /// Runs `body` with the fd while no other thread can take or close it.
    func withRawValue<T>(_ body: (Int32?) throws -> T) rethrows -> T {
        try state.withLock { fd in try body(fd) }
    }

    package static func == (lhs: UnixFileDescriptor, rhs: UnixFileDescriptor) -> Bool { lhs === rhs }
    package func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
