import Foundation
import Machines
import Synchronization
import Trust

/// Run-wide bookkeeping shared by the supervisor and the work task.
final class RunState: Sendable {
    private struct Inner {
        var book: PeerBook
        var received = 0
        var sequence = 0
        /// Per peer address, the last messages with unconfirmed ACKs: each visit takes its sender's, gives them back.
        var stored = StoredMessages()
        var visit = ""
        /// Per sender address, the channel its last visit opened.
        var knownChannels = BoundedAddressTable<KnownChannel>(capacity: RunState.addressCapacity)
    }

    private let inner: Mutex<Inner>
    private let started = ContinuousClock.now

    init(book: PeerBook) { inner = Mutex(Inner(book: book)) }

    var elapsed: Duration { ContinuousClock.now - started }
    var receivedSnapshot: Int { inner.withLock { $0.received } }

    func nextSequence() -> Int {
        inner.withLock { state in
            state.sequence += 1
            return state.sequence
        }
    }

    /// Notices said once per run: an unlisted key let in, the fallback path taken.
    let unauthenticatedNotice = OnceFlag()
    let fallbackNotice = OnceFlag()

    func markReceived() { inner.withLock { $0.received += 1 } }

    /// A token of the visit under way: receipts it wrote are not taken for earlier copies.
    var visit: String { inner.withLock { $0.visit } }

    func beginVisit() { inner.withLock { $0.visit = UUID().uuidString } }

    /// Stored messages of `address` with unconfirmed ACKs, for a visit to it (it hands back what it remembers then).
    func takeStoredMessages(of address: String) -> [UnacknowledgedMessage] {
        inner.withLock { $0.stored.take(address) }
    }

    func putStoredMessages(_ messages: [UnacknowledgedMessage], of address: String) {
        inner.withLock { $0.stored.put(messages, for: address) }
    }

    /// The channel of `address`'s last visit, if it opened and no visit failed since.
    func knownChannel(of address: String) -> KnownChannel? { inner.withLock { $0.knownChannels[address] } }

    func rememberChannel(of address: String, _ channel: KnownChannel) {
        inner.withLock { $0.knownChannels.set(channel, for: address) }
    }

    func forgetChannel(of address: String) { inner.withLock { _ = $0.knownChannels.removeValue(for: address) } }

    /// How many peer addresses the table of known channels keeps.
    static let addressCapacity = StoredMessages.addressCapacity

    func withBook<T>(_ body: (inout PeerBook) -> T) -> T { inner.withLock { body(&$0.book) } }
}
