import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Turns SIGINT/SIGTERM into an async stream while it lives (their default action, ending the
/// process at once, would leave our GATT application and advertisement registered).
public final class SignalWatcher: @unchecked Sendable {
    // @unchecked Sendable: the properties are constants; dispatch sources may be cancelled
    // from any thread, and `stop()` is all that touches them after init.
    public let stream: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]
    private let watched: [Int32]

    public init(signals: [Int32]) {
        let (stream, continuation) = AsyncStream<Int32>.makeStream()
        self.stream = stream
        self.watched = signals
        self.sources = signals.map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
    }

    /// Restores the default actions: a second Ctrl-C during the final exit ends the process.
    public func stop() {
        for source in sources { source.cancel() }
        for number in watched { signal(number, SIG_DFL) }
    }
}
