import Synchronization

/// A flag set once, read from any task.
package final class ClosedFlag: Sendable {
    private let flag = Mutex(false)

    package init() {}

    package var isSet: Bool { flag.withLock { $0 } }

    package func set() { flag.withLock { $0 = true } }
}
