import BlueZ
import DaemonSupport
import Machines

/// A subscription to the transfer characteristic's notifications: through the socket of `AcquireNotify` when BlueZ
/// grants it (one packet per notification, the value never passes through D-Bus), otherwise through `StartNotify` and
/// `PropertiesChanged` on `Value`.
///
/// Or, when the sender publishes one, an L2CAP channel that stands in for both the subscription and the writes
/// (framed version 2's `channel`): its SDUs are the values each way, and neither bluetoothd nor D-Bus sees them.
struct CharacteristicSubscription: Sendable {
    enum Mechanism: String, Sendable {
        case acquiredSocket = "AcquireNotify"
        case startNotify = "StartNotify"
        case channel = "L2CAP channel"
    }

    let mechanism: Mechanism
    /// The link's ATT MTU when known (from the socket, else `GattCharacteristic1.MTU`); on a channel, the longest SDU.
    let mtu: Int?
    private let characteristic: RemoteGATTCharacteristic
    private let socket: NotificationSocket?
    private let updates: AsyncStream<[UInt8]>?

    /// Subscribes, preferring `AcquireNotify`; refused without socket support, or (BlueZ 5.66) when another client
    /// already called `StartNotify`, `StartNotify` is used. `warn` hears why the fallback was taken.
    static func subscribe(to characteristic: RemoteGATTCharacteristic,
                          warn: @Sendable (String) -> Void) async throws -> CharacteristicSubscription {
        do {
            let socket = try await characteristic.acquireNotify()
            return CharacteristicSubscription(mechanism: .acquiredSocket, mtu: socket.mtu, characteristic: characteristic,
                                       socket: socket, updates: nil)
        } catch let error as BluetoothError {
            switch error {
            case .bluetoothdNotRunning, .accessDenied, .systemBusUnavailable, .objectGone, .deviceDisconnected:
                throw error
            default: warn("AcquireNotify refused (\(error)); subscribing with StartNotify")
            }
        } catch let error as NotificationSocketError {
            warn("AcquireNotify gave an unusable socket (\(error)); subscribing with StartNotify")
        }
        // Listen before subscribing so the first notification is not missed.
        let updates = characteristic.valueUpdates()
        try await characteristic.startNotify()
        return CharacteristicSubscription(mechanism: .startNotify, mtu: characteristic.mtu, characteristic: characteristic,
                                   socket: nil, updates: updates)
    }

    /// The session runs over an L2CAP channel: values are its SDUs, writes go on it.
    static func channel(_ socket: NotificationSocket, characteristic: RemoteGATTCharacteristic) -> CharacteristicSubscription {
        CharacteristicSubscription(mechanism: .channel, mtu: socket.maximumValueLength, characteristic: characteristic,
                                   socket: socket, updates: nil)
    }

    var overChannel: Bool { mechanism == .channel }

    /// Writes one value to the sender: one SDU on the channel (`type` does not apply: the channel is reliable and in
    /// order, and nothing answers an SDU), else a GATT write. A channel that fails throws `TransferFailure.transient`.
    func write(_ value: [UInt8], type: GATTWriteType) async throws {
        guard overChannel, let socket else {
            try await characteristic.writeValue(value, type: type)
            return
        }
        do {
            try await socket.send(value)
        } catch let error as NotificationSocketError {
            throw TransferFailure.transient("writing on the L2CAP channel failed: \(error)")
        }
    }

    /// Over a channel: waits, at most `limit`, for the sender to close it, which it does once it
    /// has read everything we wrote and has nothing more to send. Returns whether it did (our
    /// last ACK is then known to have arrived). False for GATT subscriptions. Values that come
    /// meanwhile are read and dropped: after our last ACK and CLOSE nothing more is taken.
    func waitForSenderClose(limit: Duration) async -> Bool {
        guard overChannel, let socket else { return false }
        return (try? await withTimeLimit(limit, onTimeout: { CancellationError() }) {
            while try await socket.receive() != nil {}
            return true
        }) ?? false
    }

    /// Forwards notifications into `continuation` until the subscription ends (then `.ended`) or the task is cancelled.
    func forward(into continuation: AsyncStream<TransferInput>.Continuation) async {
        if let socket {
            while true {
                do {
                    guard let value = try await socket.receive() else {
                        continuation.yield(.ended(overChannel ? "the peripheral closed the L2CAP channel"
                                                              : "the peripheral closed the notification socket"))
                        return
                    }
                    continuation.yield(.value(value))
                } catch is CancellationError {
                    return
                } catch NotificationSocketError.closed {
                    return
                } catch {
                    continuation.yield(.ended("reading notifications failed: \(error)"))
                    return
                }
            }
        } else if let updates {
            for await value in updates {
                continuation.yield(.value(value))
            }
            if !Task.isCancelled { continuation.yield(.ended("the characteristic went away")) }
        }
    }

    /// Unsubscribes: closes the socket (BlueZ then disables notifications; a channel is
    /// closed) or calls `StopNotify`. Errors are ignored: the link may already be gone.
    func close() async {
        if let socket {
            socket.close()
        } else { try? await characteristic.stopNotify() }
    }
}
