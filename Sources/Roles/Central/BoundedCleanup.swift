/// Runs clean-up work (unsubscribe, disconnect, stop discovery) to completion even when the
/// calling task was cancelled — a torn-down transfer must still release the link — but never
/// longer than `limit`, so an unresponsive bluetoothd cannot hold the central.
///
/// The work runs in a fresh task, which does not inherit the caller's cancellation; when the
/// limit passes, that task is cancelled (pending D-Bus calls are abandoned) and this returns.
func boundedCleanup(limit: Duration, _ work: @escaping @Sendable () async -> Void) async {
    let task = Task {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await work() }
            group.addTask { try? await Task.sleep(for: limit) }
            await group.next()
            group.cancelAll()
        }
    }
    await task.value
}

/// Runs `body`, throwing `onTimeout()` when `limit` passes first (the body is cancelled).
func withTimeLimit<T: Sendable>(_ limit: Duration, onTimeout: @escaping @Sendable () -> any Error,
                                _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: limit)
            throw onTimeout()
        }
        defer { group.cancelAll() }
        guard let first = try await group.next() else { throw CancellationError() }
        return first
    }
}
