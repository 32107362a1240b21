/// One source of inputs for a loop that waits on several at once (sightings and a timer, notifications, a
/// disconnection and a timer): it yields into the loop's one stream until it has nothing more to say or is cancelled.
package struct InputProducer<Input: Sendable>: Sendable {
    package let produce: @Sendable (AsyncStream<Input>.Continuation) async -> Void

    package init(_ produce: @escaping @Sendable (AsyncStream<Input>.Continuation) async -> Void) {
        self.produce = produce
    }

    /// `tick` every `interval`: wakes the loop for checks no other input triggers.
    package static func ticks(every interval: Duration, _ tick: Input) -> Self {
        Self { input in
            // A sleep cut short means the loop has left: nothing more to tell it.
            while (try? await Task.sleep(for: interval)) != nil {
                input.yield(tick)
            }
        }
    }
}

/// Runs `consume` on one stream merging what `producers` yield. The producers are child tasks of a group scoped to this
/// call: however `consume` ends (return, throw, the caller's cancellation), they are cancelled and awaited first.
package func withMergedInputs<Input: Sendable, Result>(
    _ producers: InputProducer<Input>..., consume: (AsyncStream<Input>) async throws -> Result
) async throws -> Result {
    let (inputs, input) = AsyncStream<Input>.makeStream()
    return try await withThrowingDiscardingTaskGroup { group in
        for producer in producers {
            group.addTask { await producer.produce(input) }
        }
        defer {
            group.cancelAll()
            input.finish()
        }
        return try await consume(inputs)
    }
}
