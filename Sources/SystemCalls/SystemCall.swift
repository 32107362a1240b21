import SystemPackage

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// What one C call returning a count (or -1 and `errno`) came to, `EINTR` retried. Plain reads and writes go through
/// swift-system's `FileDescriptor`, which retries itself; this covers the calls it does not wrap (`send`, `recv` with
/// flags, `poll`), so no caller writes its own EINTR loop or reads `errno` late.
package enum SystemCallResult: Equatable, Sendable {
    case completed(Int)  // a non-negative count
    /// `EAGAIN`/`EWOULDBLOCK`: a non-blocking descriptor has nothing to read or no room now.
    case wouldBlock
    case failed(Errno)  // any other failure
}

/// Runs `call` again while it fails with `EINTR`; `errno` is read right after the call, before anything can change it.
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

extension Duration {
    /// Whole milliseconds, rounded up (libdbus, epoll and poll(2) count them; down would wake before the deadline).
    /// The caller bounds the duration so the product cannot overflow.
    package var millisecondsRoundedUp: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1000 + (attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
    }
}

package struct SystemCallError: Error, Sendable, CustomStringConvertible {
    package var call: String
    package var errno: Errno

    package init(call: String, errno: Errno) {
        self.call = call
        self.errno = errno
    }

    package var description: String { "\(call) failed: \(errno)" }
}
