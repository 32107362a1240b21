import Transfer
import Trust

/// The HELLOs centrals wrote, by device, so that a subscription from a device that asked for
/// the secure format gets it, one that offered the retired version 1 is refused, and every
/// other subscription gets compat.
///
/// Bounded and expiring: a hostile central writing HELLOs from ever new addresses cannot grow
/// it past `capacity`, and a HELLO older than `lifetime` no longer counts. When it is full, the
/// least recently written entry of a device that is no longer connected makes room; entries of
/// connected devices are kept, and a new HELLO is dropped when every entry is one: a device
/// rotating addresses cannot push out the HELLO of a central that is still connected (each
/// address it keeps connected costs it a link, and disconnected ones are forgotten). Pure:
/// the caller supplies the time and which devices are connected, and names devices by its
/// own key (`DeviceKey`: BlueZ's `DeviceReference` in the sender).
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

    /// Remembers (or replaces) the HELLO `device` wrote at `time`. False when the table is
    /// full of entries of devices `isConnected` says are connected: the HELLO is not kept.
    @discardableResult
    package mutating func record(_ hello: SenderConnection.CentralHello, from device: DeviceKey,
                         at time: ContinuousClock.Instant,
                         isConnected: (DeviceKey) -> Bool = { _ in false }) -> Bool {
        removeExpired(at: time)
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

    /// The HELLO `device` wrote, if it is still valid at `time`. It stays valid for later
    /// subscriptions of the same device (a central that subscribes again after an aborted
    /// transfer keeps its format), until it expires or is replaced.
    package func hello(from device: DeviceKey, at time: ContinuousClock.Instant) -> SenderConnection.CentralHello {
        guard let entry = entries[device], time - entry.writtenAt <= lifetime else { return .none }
        return entry.hello
    }

    /// The device whose HELLO is the most recent still valid at `time`. For the StartNotify
    /// path, where BlueZ does not say which device subscribed.
    package func mostRecent(at time: ContinuousClock.Instant) -> (device: DeviceKey, hello: SenderConnection.CentralHello)? {
        entries.filter { time - $0.value.writtenAt <= lifetime }
            .max(by: { $0.value.writtenAt < $1.value.writtenAt })
            .map { ($0.key, $0.value.hello) }
    }

    package mutating func forget(_ device: DeviceKey) {
        entries[device] = nil
    }

    private mutating func removeExpired(at time: ContinuousClock.Instant) {
        entries = entries.filter { time - $0.value.writtenAt <= lifetime }
    }
}
