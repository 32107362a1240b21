import BlueZ
import DaemonSupport
import Logging
import Machines
import Synchronization
import Transfer
import Trust

/// The framed protocol over an L2CAP channel (docs/wire-formats.md): each channel a central opens is accepted,
/// matched to its connection, and handed to the server once its first SDU is a HELLO offering the channel.
extension Peripheral {
    /// Channels whose first SDU is awaited at once: more are refused on arrival, so a flood of silent channels costs
    /// memory and descriptors up to this only, while one silent channel never holds up an honest central's HELLO.
    static let channelsAwaitingHello = 4

    /// Accepts centrals' channels on `listener` until cancelled. Each channel's first SDU must be a version-2 HELLO
    /// offering `channel` within `helloTimeout`; the wait for it runs beside the others (at most
    /// `channelsAwaitingHello`), then the server takes the channel or it is closed with one line naming the central.
    static func acceptChannels(from listener: any ChannelListener, on adapter: Adapter,
                                       session: BluetoothSession, server: SubscriptionServer,
                                       helloTimeout: Duration, logger: Logger,
                                       onEvent: @escaping @Sendable (RoleEvent) -> Void) async {
        let awaitingHello = ChannelHelloWaits()
        await withDiscardingTaskGroup { group in
            while !Task.isCancelled {
                let accepted: AcceptedChannel
                do {
                    accepted = try await listener.accept()
                } catch {
                    if !Task.isCancelled { logger.debug("the L2CAP listener stopped: \(error)") }
                    group.cancelAll()
                    return
                }
                guard awaitingHello.admit(limit: channelsAwaitingHello) else {
                    let peer = PeerResolver.describe(connectedDevice(accepted.peer, on: adapter, in: session), in: session)
                    onEvent(.centralDropped(peer, reason: "it opened the L2CAP channel while \(channelsAwaitingHello) "
                        + "others had not written their HELLO yet"))
                    accepted.socket.close()
                    continue
                }
                group.addTask {
                    defer { awaitingHello.release() }
                    guard let device = await connectionOf(accepted, on: adapter, in: session) else {
                        // Every honest central connected over the link bluetoothd manages first.
                        onEvent(.centralDropped(PeerDescription(address: accepted.peer?.description ?? "an unknown address"),
                                                reason: "it opened the L2CAP channel without a connection of \(adapter.name) "
                                                    + "bluetoothd knows (not a GATT client of this sender)"))
                        accepted.socket.close()
                        return
                    }
                    let peer = PeerResolver.describe(device, in: session)
                    let first = try? await withTimeLimit(helloTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
                        try await accepted.socket.receive()
                    }
                    guard let first, let hello = HelloV2(parsing: first), hello.offered.contains(.channel) else {
                        onEvent(.centralDropped(peer, reason: first == nil
                            ? "it opened the L2CAP channel and wrote no HELLO within \(SubscriptionDelivery.describe(helloTimeout))"
                            : "it opened the L2CAP channel without a framed version 2 HELLO offering it"))
                        accepted.socket.close()
                        return
                    }
                    await server.acceptChannel(accepted.socket, device: device, hello: hello)
                }
            }
        }
    }

    /// How long a channel's central may take to show as connected in bluetoothd's objects: one opening the channel as
    /// soon as its link is up (knowing our PSM from a visit) can beat bluetoothd's report of it.
    static let connectionReportWait: Duration = .seconds(3)

    /// The connected device that opened `accepted`: the kernel names the central's address,
    /// awaited for `connectionReportWait` among bluetoothd's devices; a transport that cannot
    /// name it (tests) leaves the only connected device.
    private static func connectionOf(_ accepted: AcceptedChannel, on adapter: Adapter,
                                     in session: BluetoothSession) async -> DeviceReference? {
        guard let address = accepted.peer else { return connectedDevice(nil, on: adapter, in: session) }
        try? await session.waitUntil("\(address) is connected", timeout: connectionReportWait) { _ in
            connectedDevice(address, on: adapter, in: session) != nil
        }
        return connectedDevice(address, on: adapter, in: session)
    }

    private static func connectedDevice(_ address: BluetoothAddress?, on adapter: Adapter,
                                        in session: BluetoothSession) -> DeviceReference? {
        guard let address else { return PeerResolver.onlyConnectedDevice(on: adapter, in: session) }
        return adapter.device(address: address).flatMap { $0.properties?.connected == true ? $0.reference : nil }
    }
}

/// How many accepted channels are waiting for their HELLO, shared by the tasks that wait.
private final class ChannelHelloWaits: Sendable {
    private let count = Mutex(0)

    /// Counts one more wait unless `limit` are under way.
    func admit(limit: Int) -> Bool {
        count.withLock { count in
            guard count < limit else { return false }
            count += 1
            return true
        }
    }

    func release() { count.withLock { $0 -= 1 } }
}
