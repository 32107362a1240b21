import BlueZ
import DaemonSupport

/// How notification values reach one subscribed central: through the socket BlueZ took with
/// `AcquireNotify`, or through `PropertiesChanged(Value)` after `StartNotify` (the fallback).
protocol NotificationChannel: Sendable {
    /// The longest value one notification carries on this link (ATT MTU − 3).
    var maximumValueLength: Int { get }
    /// Whether `send` waits for the link (back-pressure) or only paces.
    var hasBackPressure: Bool { get }
    /// Hands one value to BlueZ, waiting while it cannot take more. Throws once the subscription is gone.
    func send(_ value: [UInt8]) async throws
    /// Returns once bluetoothd took everything sent, as far as this channel can tell: what "written" means for `EOM`.
    func drain() async throws
    /// Whether bluetoothd has taken everything sent so far, right now. Asked when the central is found gone while the
    /// last values drain: `drain` polls, and a fast central may get `EOM`, unsubscribe and disconnect between polls.
    var isDrained: Bool { get }
    /// Stops the channel; a `send` waiting for room fails.
    func close()
}

/// The AcquireNotify socket: one packet per notification, `EAGAIN` when bluetoothd has not
/// read what we wrote (the analogue of CoreBluetooth's `updateValue` returning NO).
struct SocketNotificationChannel: NotificationChannel {
    let socket: NotificationSocket

    var maximumValueLength: Int { socket.maximumValueLength }
    var hasBackPressure: Bool { true }

    func send(_ value: [UInt8]) async throws { try await socket.send(value) }

    /// "Written" means bluetoothd read every value from the socket (SIOCOUTQ reached 0), also when it closed the
    /// socket right after (the central unsubscribed after `EOM`). A central that left while values were still unread
    /// makes this throw `.closedByPeer`. bluetoothd reads the socket as fast as it can and queues notifications
    /// itself, so this says nothing about the radio; only the framed ACK does.
    func drain() async throws { try await socket.waitUntilDrained() }

    var isDrained: Bool { (try? socket.unsentByteCount) == 0 }

    func close() { socket.close() }
}

/// The fallback when BlueZ subscribed us through `StartNotify`: each value is emitted as `PropertiesChanged(Value)`,
/// which bluetoothd turns into a notification to every subscriber. There is no back-pressure on this path (bluetoothd
/// queues whatever it gets), so values are paced by a fixed interval instead; the interval is a rate limit, not a
/// wait for an event (none exists).
struct PropertiesChangedNotificationChannel: NotificationChannel {
    let maximumValueLength: Int
    let interval: Duration
    let emit: @Sendable ([UInt8]) throws -> Void
    private let closed = ClosedFlag()

    var hasBackPressure: Bool { false }

    func send(_ value: [UInt8]) async throws {
        try Task.checkCancellation()
        if closed.isSet { throw NotificationSocketError.closed }
        try emit(value)
        if interval > .zero {
            try await Task.sleep(for: interval)
        } else { await Task.yield() }
    }

    /// Every value was on the bus once `send` returned: all "written" can mean here, even if BlueZ stopped since.
    func drain() async throws {}

    var isDrained: Bool { true }

    func close() { closed.set() }
}
