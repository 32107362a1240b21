import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What one C call that returns a count (or -1 and `errno`) came to, once interruptions by a
/// signal were retried. Plain reads and writes go through swift-system's `FileDescriptor`,
/// which retries `EINTR` itself; this covers the calls it does not wrap (`send`, `recv` with
/// flags, `poll`), so that no caller writes its own EINTR loop or reads `errno` late.
package enum SystemCallResult: Equatable, Sendable {
    /// The call returned this non-negative count.
    case completed(Int)
    /// `EAGAIN`/`EWOULDBLOCK`: a non-blocking descriptor has nothing to read or no room now.
    case wouldBlock
    /// Any other failure, with its errno.
    case failed(Errno)
}

/// Runs `call` again while it fails with `EINTR`, and says what it came to. `errno` is read
/// right after the call, before anything else can change it.
package func retryingInterrupts(_ call: () -> Int) -> SystemCallResult {
    while true {
        let result = call()
        if result >= 0 { return .completed(result) }
        let code = errno
        switch code {
        case EINTR: continue
        case EAGAIN, EWOULDBLOCK: return .wouldBlock
        default: return .failed(Errno(rawValue: code))
        }
    }
}

/// A failed system call, with the call's name and errno.
package struct SystemCallError: Error, Sendable, CustomStringConvertible {
    package var call: String
    package var errno: Errno

    package init(call: String, errno: Errno) {
        self.call = call
        self.errno = errno
    }

    package var description: String { "\(call) failed: \(errno)" }
}
