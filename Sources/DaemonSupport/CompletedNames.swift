import Synchronization

/// Names of files the directory watcher saw finished: moved in (the Maildir way: written elsewhere, then renamed in) or
/// closed after writing. Each with the time it was seen; a file whose status changed after that is being written again
/// and must settle. Bounded: past `capacity` the oldest are forgotten (they then settle as any file).
package final class CompletedNames: Sendable {
    private let state = Mutex<[String: FileTime]>([:])
    let capacity: Int

    init(capacity: Int = 4096) { self.capacity = max(1, capacity) }

    func record(_ name: String, at time: FileTime) {
        state.withLock { names in
            names[name] = time
            if names.count > capacity, let oldest = names.min(by: { $0.value < $1.value })?.key { names[oldest] = nil }
        }
    }

    /// Whether `name` was seen finished at or after `changed` (its last status change).
    func isComplete(_ name: String, changedAt changed: FileTime) -> Bool {
        state.withLock { names in names[name].map { $0 >= changed } ?? false }
    }
}
