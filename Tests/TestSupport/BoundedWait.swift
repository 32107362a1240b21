/// The value of `task`, or nil once `limit` passed (the task is then cancelled): a sender that
/// never counts its delivery fails the test instead of hanging the suite, whose time limit
/// cannot interrupt an await on another task's value.
package func value<Success: Sendable>(of task: Task<Success, any Error>, within limit: Duration) async -> Success? {
    let watchdog = Task {
        try await Task.sleep(for: limit)
        task.cancel()
    }
    defer { watchdog.cancel() }
    return try? await task.value
}
