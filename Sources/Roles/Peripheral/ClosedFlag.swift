import Foundation

/// A flag set once, read from any task.
final class ClosedFlag: @unchecked Sendable {
    // @unchecked Sendable: `flag` is only read and written while holding `lock`.
    // (Synchronization.Atomic would do, but the package still declares macOS 13.)
    private let lock = NSLock()
    private var flag = false

    var isSet: Bool {
        lock.lock()
        defer { lock.unlock() }
        return flag
    }

    func set() {
        lock.lock()
        flag = true
        lock.unlock()
    }
}
