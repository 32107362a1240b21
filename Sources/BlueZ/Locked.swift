import Foundation

/// A value guarded by a lock, for state that synchronous accessors and several tasks share.
///
/// `Synchronization.Mutex` would do, but the package still declares macOS 13, where it is not
/// available; an `NSLock` works everywhere we build.
final class Locked<Value>: @unchecked Sendable {
    // @unchecked Sendable: every access to `value` goes through `lock`, so no two threads
    // touch it at once; callers must not let a reference escape `withLock`.
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
