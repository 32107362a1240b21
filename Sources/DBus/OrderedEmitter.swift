/// Runs async jobs one after another, in submission order: for signals whose contents need `await` (InterfacesAdded
/// reads async getters), so an object's InterfacesAdded never overtakes its InterfacesRemoved.
final class OrderedEmitter: Sendable {
    typealias Job = @Sendable () async -> Void
    private let continuation: AsyncStream<Job>.Continuation

    init() {
        let (stream, continuation) = AsyncStream<Job>.makeStream()
        self.continuation = continuation
        // Unstructured: lives as long as the emitter and ends when `finish()` ends the stream.
        Task {
            for await job in stream { await job() }
        }
    }

    func submit(_ job: @escaping Job) { continuation.yield(job) }

    /// Jobs already submitted still run; later ones are dropped.
    func finish() { continuation.finish() }
}
