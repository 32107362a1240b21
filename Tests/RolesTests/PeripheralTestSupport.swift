import BlueZ
import Logging
import DBus
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import Trust

/// Role events as they happen, with waits driven by the events themselves.
final class PeripheralEventLog: @unchecked Sendable {
    // @unchecked Sendable: `events`, `waiters`, `boundedWaiters` and `finished` are only touched
    // under `lock`.
    private let lock = NSLock()
    private var events: [RoleEvent] = []
    private var waiters: [(predicate: @Sendable (RoleEvent) -> Bool, continuation: CheckedContinuation<Bool?, Never>)] = []
    /// Waits that also end (false) at their deadline, by id.
    private var boundedWaiters: [Int: (predicate: @Sendable (RoleEvent) -> Bool, continuation: CheckedContinuation<Bool, Never>)] = [:]
    private var nextWaiterID = 0
    /// Bounded waits whose deadline passed before they were registered.
    private var expiredWaiterIDs: Set<Int> = []
    private var finished = false
    private var finishWaiters: [CheckedContinuation<Void, Never>] = []

    init() {}

    /// Follows `stream` until it finishes.
    convenience init(following stream: AsyncStream<RoleEvent>) {
        self.init()
        Task {
            for await event in stream { self.append(event) }
            self.finish()
        }
    }

    func append(_ event: RoleEvent) {
        lock.lock()
        events.append(event)
        var ready: [CheckedContinuation<Bool?, Never>] = []
        waiters.removeAll { waiter in
            guard waiter.predicate(event) else { return false }
            ready.append(waiter.continuation)
            return true
        }
        let matched = boundedWaiters.filter { $0.value.predicate(event) }
        for id in matched.keys { boundedWaiters[id] = nil }
        lock.unlock()
        for continuation in ready { continuation.resume(returning: true) }
        for waiter in matched.values { waiter.continuation.resume(returning: true) }
    }

    /// True once an event matching `predicate` was emitted (or already had been); false when
    /// the stream finished first or `limit` passed.
    func waitFor(within limit: Duration, _ predicate: @escaping @Sendable (RoleEvent) -> Bool) async -> Bool {
        let id = lock.withLock {
            defer { nextWaiterID += 1 }
            return nextWaiterID
        }
        let deadline = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.expire(id)
        }
        defer { deadline.cancel() }
        return await withCheckedContinuation { continuation in
            lock.lock()
            if events.contains(where: predicate) {
                lock.unlock()
                continuation.resume(returning: true)
            } else if finished || expiredWaiterIDs.remove(id) != nil {
                lock.unlock()
                continuation.resume(returning: false)
            } else {
                boundedWaiters[id] = (predicate, continuation)
                lock.unlock()
            }
        }
    }

    /// The bounded wait `id` reached its deadline (if it is still waiting).
    private func expire(_ id: Int) {
        lock.lock()
        let waiter = boundedWaiters.removeValue(forKey: id)
        if waiter == nil { expiredWaiterIDs.insert(id) }
        lock.unlock()
        waiter?.continuation.resume(returning: false)
    }

    private func finish() {
        lock.lock()
        finished = true
        let pending = waiters
        waiters.removeAll()
        let bounded = boundedWaiters.values
        boundedWaiters.removeAll()
        let done = finishWaiters
        finishWaiters.removeAll()
        lock.unlock()
        for waiter in pending { waiter.continuation.resume(returning: false) }
        for waiter in bounded { waiter.continuation.resume(returning: false) }
        for waiter in done { waiter.resume() }
    }

    var all: [RoleEvent] {
        lock.lock()
        defer { lock.unlock() }
        return events
    }

    /// Every event, once the stream finished.
    func allWhenFinished() async -> [RoleEvent] {
        await withCheckedContinuation { continuation in
            lock.lock()
            if finished {
                lock.unlock()
                continuation.resume()
            } else {
                finishWaiters.append(continuation)
                lock.unlock()
            }
        }
        return all
    }

    /// Returns true once `count` events matching `predicate` were emitted; false if the stream
    /// finished first.
    @discardableResult
    func waitFor(count: Int = 1, _ predicate: @escaping @Sendable (RoleEvent) -> Bool) async -> Bool {
        while true {
            let outcome: Bool? = await withCheckedContinuation { continuation in
                lock.lock()
                if events.filter(predicate).count >= count {
                    lock.unlock()
                    continuation.resume(returning: nil)
                } else if finished {
                    lock.unlock()
                    continuation.resume(returning: false)
                } else {
                    waiters.append((predicate, continuation))
                    lock.unlock()
                }
            }
            switch outcome {
            case nil: return true
            case false?: return false
            case true?: continue   // one more matched; check the count again
            }
        }
    }

    var abortReasons: [String] {
        all.compactMap { if case .transferAborted(_, let reason) = $0 { reason } else { nil } }
    }

    var subscribedFormats: [TransferFormat] {
        all.compactMap { if case .subscribed(_, _, let format, _) = $0 { format } else { nil } }
    }
}

extension RoleEvent {
    var isAdvertising: Bool { if case .advertising = self { true } else { false } }
    var deliveredSummary: MessageSummary? { if case .delivered(let summary, _) = self { summary } else { nil } }
}

extension ServerActivity {
    var subscriber: PeerDescription? { if case .subscribed(let peer) = self { peer } else { nil } }
    var deliveredSequence: Int? { if case .delivered(let sequence) = self { sequence } else { nil } }
    var isSubscriptionEnd: Bool { if case .subscriptionEnded = self { true } else { false } }
}

/// The source a test server's connections count their deliveries in: it serves nothing itself
/// (the harness offers), and keeps what was delivered.
actor DeliveredMessages: MessageSource {
    private var delivered: [(message: OutgoingMessage, summary: MessageSummary)] = []

    func current() async -> OutgoingMessage? { nil }

    func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async {
        delivered.append((message, summary))
    }

    func delivery(sequence: Int) -> (message: OutgoingMessage, summary: MessageSummary)? {
        delivered.first { $0.summary.sequence == sequence }
    }
}

extension SubscriptionServer {
    /// A server without a bus whose connections run (as the serving period runs them) and
    /// count their deliveries in `delivered`.
    static func forTests(configuration: PeripheralConfiguration, delivered: DeliveredMessages, bluetoothUp: Bool = true,
                         exposure: EnhancedATTExposure = .none(because: "one bearer in these tests"),
                         disconnectDevice: @escaping @Sendable (DeviceReference) async -> Void = { _ in },
                         log: PeripheralEventLog) -> SubscriptionServer {
        let server = SubscriptionServer(
            configuration: configuration, logger: Logger(label: "test"),
            deliveries: SenderDeliveries(source: delivered, counter: DeliveryCounter(), emit: { log.append($0) }),
            describePeer: { device in PeerDescription(address: device?.address?.description ?? "unknown") },
            bluetoothStillUp: { bluetoothUp }, linkExposure: { _ in exposure },
            disconnectDevice: disconnectDevice, emitEvent: { log.append($0) })
        // Unstructured in tests: the server's connections run for as long as the test's server.
        Task { await server.runConnections() }
        return server
    }
}

/// Our ends of the sockets a harness handed to its server, kept open for the whole test as
/// BlueZ keeps its references (the server's close, not their release, ends a subscription).
final class AcceptedSockets: @unchecked Sendable {
    // @unchecked Sendable: `sockets` is only touched while holding `lock`.
    private let lock = NSLock()
    private var sockets: [NotificationSocket] = []

    func keep(_ socket: NotificationSocket) { lock.withLock { sockets.append(socket) } }
}

/// A `SubscriptionServer` driven without a bus, and the activity it reports.
protocol SubscriptionServerHarness {
    var server: SubscriptionServer { get }
    var accepted: AcceptedSockets { get }
    var delivered: DeliveredMessages { get }
    /// The next activity the server reports; nil once it ended.
    mutating func nextActivity() async -> ServerActivity?
}

extension SubscriptionServerHarness {
    /// The next activity, which must be a subscription: the subscriber.
    @discardableResult
    mutating func nextSubscription(_ comment: Comment = "expected a subscription",
                                   sourceLocation: SourceLocation = #_sourceLocation) async throws -> PeerDescription {
        let next = await nextActivity()
        return try #require(next?.subscriber, comment, sourceLocation: sourceLocation)
    }

    /// The next activity, which must be a delivery: the message and its summary.
    @discardableResult
    mutating func nextDelivery(_ comment: Comment = "expected a delivery", sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> (message: OutgoingMessage, summary: MessageSummary) {
        let next = await nextActivity()
        let sequence = try #require(next?.deliveredSequence, comment, sourceLocation: sourceLocation)
        return try #require(await delivered.delivery(sequence: sequence), comment, sourceLocation: sourceLocation)
    }

    /// The next activity, which must be the end of the subscription.
    mutating func nextSubscriptionEnd(_ comment: Comment = "expected the subscription to end",
                                      sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let next = await nextActivity()
        try #require(next?.isSubscriptionEnd == true, comment, sourceLocation: sourceLocation)
    }

    /// A central on `device` subscribes through AcquireNotify: our end goes to the server
    /// (returned as `local` for queue checks), BlueZ's end is returned to read from. The
    /// server must report the subscription.
    mutating func subscribe(mtu: Int, device: DeviceReference = PeripheralSubscriptionServerTests.device,
                            indications: Bool = false, _ comment: Comment = "expected a subscription",
                            sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> (local: NotificationSocket, bluez: NotificationSocket) {
        let (local, bluez) = try NotificationSocket.makePair(mtu: mtu)
        accepted.keep(local)
        await server.acceptSocket(local, device: device, indications: indications)
        try await nextSubscription(comment, sourceLocation: sourceLocation)
        return (local, bluez)
    }

    /// A framed central (the encrypted session over GATT, one message): writes a version-2
    /// HELLO for `session`, then subscribes as `subscribe` does. Returns the central's side of
    /// the session (a fresh key, any sender key taken) and BlueZ's end of the socket.
    mutating func subscribeSecure(session: UInt64, mtu: Int, sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> (central: SecureCentral, bluez: NotificationSocket) {
        let hello = HelloV2(session: session, offered: [.secure])
        await server.write(hello.encoded, device: PeripheralSubscriptionServerTests.device, mtu: mtu)
        let (_, bluez) = try await subscribe(mtu: mtu, sourceLocation: sourceLocation)
        let receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: mtu - 3)
        return (SecureCentral(server: server, session: receiver, mtu: mtu), bluez)
    }

    /// A central that offered the retired framed version 1: writes its HELLO, then subscribes.
    /// The server refuses it, so no subscription is reported; returns BlueZ's end of the socket.
    mutating func subscribeVersion1(session: UInt64, mtu: Int) async throws -> NotificationSocket {
        let hello: [UInt8] = [0x89, 0x42, 0x4C, 0x54, 0x48, 1] + (0..<8).map { UInt8(truncatingIfNeeded: session >> (56 - 8 * $0)) }
        await server.write(hello, device: PeripheralSubscriptionServerTests.device, mtu: mtu)
        let (local, bluez) = try NotificationSocket.makePair(mtu: mtu)
        accepted.keep(local)
        await server.acceptSocket(local, device: PeripheralSubscriptionServerTests.device)
        return bluez
    }
}

/// The receiving side of an encrypted session against a `SubscriptionServer`: reads the
/// session's values from BlueZ's end of the socket and writes its answers (handshake, ACK) to
/// the server as the subscribed device's GATT writes.
struct SecureCentral {
    let server: SubscriptionServer
    var session: SecureReceiverSession
    let mtu: Int
    var device = PeripheralSubscriptionServerTests.device

    /// Reads until the message completes (its END verified) and the stream's `EOM` came, as
    /// bluetoothd would take it (the sender waits for that before it counts an ACK); returns
    /// the payload, or nil when the socket closed first. Writes no ACK.
    mutating func receive(from bluez: NotificationSocket) async throws -> [UInt8]? {
        var payload: [UInt8]?
        var kept: [UInt8] = []
        while let value = try await bluez.receive() {
            if value == WireFormat.endOfMessage, payload != nil { return payload }
            for event in try session.receiveNotification(value) {
                switch event {
                case .write(let write), .progressWrite(let write):
                    await server.write(write, device: device, mtu: mtu)
                case .appended(_, let bytes):
                    kept += bytes
                case .complete:
                    payload = kept
                default:
                    break
                }
            }
        }
        return nil
    }

    /// Writes the sealed ACK of the completed message ("stored").
    mutating func acknowledge() async throws {
        for value in try session.acknowledgement(outcome: 0) {
            await server.write(value, device: device, mtu: mtu)
        }
    }
}

/// What the sender has registered on hci0 of a BlueZoo bus, as another session sees it: the
/// transfer service among the adapter's UUIDs, and the active advertising instances.
struct RegistrationProbe: Sendable {
    let observer: BluetoothSession

    static let adapterPath: ObjectPath = "/org/bluez/hci0"

    func registered() -> (service: Bool, advertisements: Int) {
        let service = TransferUUIDs.appleSampleService.canonical
        let uuids = observer.properties(of: Self.adapterPath, interface: BlueZInterface.adapter)?["UUIDs"]?.strings ?? []
        let active = observer.properties(of: Self.adapterPath, interface: BlueZInterface.advertisingManager)?["ActiveInstances"]
        return (uuids.contains(service), Int(active?.byte ?? 0))
    }

    /// Returns once `registered()` is `expected`, waiting on BlueZ's own change signals.
    func wait(until expected: (service: Bool, advertisements: Int)) async {
        let changes = observer.changes()
        if registered() == expected { return }
        for await _ in changes where registered() == expected { break }
    }
}

extension SenderConnection.CentralHello {
    /// The session of a version-2 HELLO (nil: none, or a retired one).
    var session: UInt64? { if case .version2(let hello) = self { hello.session } else { nil } }
}
