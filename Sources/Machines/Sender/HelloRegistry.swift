import Transfer
import Trust

/// The HELLOs centrals wrote, by device: a device that asked for the secure format gets it, one that offered version
/// 1 is refused, every other subscription gets compat. Pure (`DeviceKey`: BlueZ's `DeviceReference` in the sender).
///
/// Bounded and expiring: HELLOs from ever new addresses cannot grow it past `capacity`; one older than `lifetime` no
/// longer counts. When full, the oldest entry of a disconnected device makes room; if all are connected the new HELLO
/// is dropped: rotating addresses cannot push out a connected central's (each kept connected costs a link).
package struct HelloRegistry<DeviceKey: Hashable & Sendable>: Sendable {
    package struct Entry: Sendable {
        var hello: SenderConnection.CentralHello
        var writtenAt: ContinuousClock.Instant
    }

    package let capacity: Int
    package let lifetime: Duration
    package private(set) var entries: [DeviceKey: Entry] = [:]

    package init(capacity: Int, lifetime: Duration) {
        self.capacity = max(1, capacity)
        self.lifetime = lifetime
    }

    /// Remembers (or replaces) `device`'s HELLO; false (not kept) when full of connected devices'.
    @discardableResult
    package mutating func record(_ hello: SenderConnection.CentralHello, from device: DeviceKey,
                         at time: ContinuousClock.Instant,
                         isConnected: (DeviceKey) -> Bool = { _ in false }) -> Bool {
        entries = entries.filter { time - $0.value.writtenAt <= lifetime }
        if entries[device] == nil {
            while entries.count >= capacity {
                guard let oldest = entries.filter({ !isConnected($0.key) })
                    .min(by: { $0.value.writtenAt < $1.value.writtenAt })?.key else { return false }
                entries[oldest] = nil
            }
        }
        entries[device] = Entry(hello: hello, writtenAt: time)
        return true
    }

    /// The HELLO `device` wrote, if still valid at `time`: later subscriptions of the device keep
    /// its format (after an aborted transfer) until it expires or is replaced.
    package func hello(from device: DeviceKey, at time: ContinuousClock.Instant) -> SenderConnection.CentralHello {
        guard let entry = entries[device], time - entry.writtenAt <= lifetime else { return .none }
        return entry.hello
    }

    /// The most recent valid HELLO's device: for StartNotify, where BlueZ does not say who subscribed.
    package func mostRecent(at time: ContinuousClock.Instant) -> (device: DeviceKey, hello: SenderConnection.CentralHello)? {
        entries.filter { time - $0.value.writtenAt <= lifetime }
            .max(by: { $0.value.writtenAt < $1.value.writtenAt })
            .map { ($0.key, $0.value.hello) }
    }

    package mutating func forget(_ device: DeviceKey) {
        entries[device] = nil
    }
}
