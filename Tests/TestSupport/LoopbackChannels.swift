import BlueZ
import BluetoothModel
import Synchronization

/// A `ChannelTransport` for hosts without Bluetooth sockets (the test machine): a listener is a
/// PSM in this object's table, and a connection is a connected `SOCK_SEQPACKET` pair, one end
/// returned to the connecting side and the other handed to the listener's `accept`, with the
/// connecting adapter's address as the peer (what the kernel reports for a real channel).
/// Share one instance between a sender and a receiver in the same process.
package final class LoopbackChannels: ChannelTransport {
    private struct State {
        var nextPSM: UInt16 = 0x0080
        var listeners: [UInt16: LoopbackListener] = [:]
        var connections = 0
        var refusesConnections = false
    }

    private let state = Mutex(State())

    package init() {}

    /// Channels opened through this transport so far.
    package var connectionCount: Int { state.withLock { $0.connections } }

    /// From now on, `connect` fails as an unreachable PSM does (the central must go on over GATT).
    package func refuseConnections() {
        state.withLock { $0.refusesConnections = true }
    }

    package func listen(adapter: BluetoothAddress?, addressType: LEAddressType, receiveMTU: Int) throws -> any ChannelListener {
        state.withLock { state -> LoopbackListener in
            let listener = LoopbackListener(psm: state.nextPSM)
            state.listeners[state.nextPSM] = listener
            state.nextPSM += 1
            return listener
        }
    }

    package func connect(adapter: BluetoothAddress?, addressType: LEAddressType, to peer: BluetoothAddress,
                        peerType: LEAddressType, psm: UInt16, receiveMTU: Int) async throws -> NotificationSocket {
        let listener = state.withLock { state -> LoopbackListener? in
            guard !state.refusesConnections, let listener = state.listeners[psm], !listener.isClosed else { return nil }
            state.connections += 1
            return listener
        }
        guard let listener else { throw L2CAPChannelError.systemCall("connect(L2CAP)", .connectionRefused) }
        let limits = NotificationSocket.PacketLimits(send: receiveMTU, receive: receiveMTU)
        let (local, remote) = try NotificationSocket.makePair(limits: limits)
        listener.deliver(AcceptedChannel(socket: remote, peer: adapter))
        return local
    }
}

/// The listening side of a `LoopbackChannels` PSM: connections wait here until accepted.
final class LoopbackListener: ChannelListener {
    let psm: UInt16
    private struct State {
        var pending: [AcceptedChannel] = []
        var waiter: CheckedContinuation<AcceptedChannel?, Never>?
        var closed = false
    }
    private let state = Mutex(State())

    init(psm: UInt16) {
        self.psm = psm
    }

    var isClosed: Bool { state.withLock { $0.closed } }

    func deliver(_ channel: AcceptedChannel) {
        let waiter = state.withLock { state -> CheckedContinuation<AcceptedChannel?, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.pending.append(channel)
            return nil
        }
        waiter?.resume(returning: channel)
    }

    func accept() async throws -> AcceptedChannel {
        let next = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<AcceptedChannel?, Never>) in
                let ready: AcceptedChannel?? = state.withLock { state in
                    if !state.pending.isEmpty { return .some(state.pending.removeFirst()) }
                    if state.closed || Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let ready { continuation.resume(returning: ready) }
            }
        } onCancel: {
            close()
        }
        try Task.checkCancellation()
        guard let next else { throw L2CAPChannelError.closed }
        return next
    }

    func close() {
        let (waiter, pending) = state.withLock { state -> (CheckedContinuation<AcceptedChannel?, Never>?, [AcceptedChannel]) in
            state.closed = true
            defer { state.waiter = nil; state.pending = [] }
            return (state.waiter, state.pending)
        }
        for channel in pending { channel.socket.close() }
        waiter?.resume(returning: nil)
    }
}
