import BlueZ
import DaemonSupport
import Logging
import Machines
import Storage
import Transfer
import Trust

/// What the subscription server tells the engine that drives advertising and the message source.
enum ServerActivity: Sendable {
    case subscribed(PeerDescription)
    /// A one-message connection's message was delivered (counted by the connection): the engine offers the next one.
    case delivered(sequence: Int)
    /// The subscription is over (delivered or not); the characteristic is free again.
    case subscriptionEnded
    /// An authorized central was refused because the offered message is addressed to another
    /// peer: the engine may offer a message for this one instead, for its next visit.
    case addressedElsewhere(AuthenticatedPeer)
}

/// The peripheral's router for one registration period, free of D-Bus: it takes the calls BlueZ makes on our
/// characteristic (a write, `AcquireNotify`, `StartNotify`, `StopNotify`, `Confirm`) plus device disconnections and
/// accepted L2CAP channels, starts a connection for one subscriber at a time, and routes what BlueZ says about that
/// central into it.
///
/// Everything a connection decides is its `SenderConnection` machine's, carried out by its task
/// (`SenderConnectionShell`), a child of `runConnections`: the message from byte 0, the encrypted session or Apple's
/// flow, when the message counts, its bounds. This actor keeps only what outlives a connection — the offered message,
/// the HELLOs centrals wrote and their MTUs — and hears from a connection once, when it ends.
///
/// Outside a session, a write that is not a HELLO is ignored (logged at debug level); nothing a central writes is
/// stored beyond the bounded HELLO table.
actor SubscriptionServer {
    /// The connection being served: where its inputs go.
    private struct Serving {
        let id: Int
        /// The device, when BlueZ said who subscribed.
        let device: DeviceReference?
        let link: SenderLink
        let inputs: AsyncStream<SenderConnection.Input>.Continuation
        /// A secure session over GATT: everything its central writes is the session's.
        let takesWrites: Bool
    }

    private let configuration: PeripheralConfiguration
    private let environment: SenderEnvironment
    private var fallbackEmit: (@Sendable (_ value: [UInt8], _ characteristic: Int) throws -> Void)?

    nonisolated let activity: AsyncStream<ServerActivity>
    private let starts: AsyncStream<SenderConnectionShell>
    private let startContinuation: AsyncStream<SenderConnectionShell>.Continuation

    private var offered: SenderConnection.Offer?
    private var hellos: HelloRegistry<DeviceReference>
    /// ATT MTU by device, from the options of their writes: the StartNotify path gets no MTU,
    /// and a value longer than MTU − 3 would be cut by bluetoothd without a word.
    private var mtus: [DeviceReference: Int] = [:]
    private var current: Serving?
    private var nextID = 1
    private var isShutDown = false
    private var endWaiters: [CheckedContinuation<Void, Never>] = []

    init(configuration: PeripheralConfiguration, logger: Logger, deliveries: SenderDeliveries,
         describePeer: @escaping @Sendable (DeviceReference?) -> PeerDescription,
         bluetoothStillUp: @escaping @Sendable () -> Bool = { true },
         linkExposure: @escaping @Sendable (_ address: String) -> EnhancedATTExposure = { GATTBearers.exposure(to: $0) },
         disconnectDevice: @escaping @Sendable (_ device: DeviceReference) async -> Void = { _ in },
         emitEvent: @escaping @Sendable (RoleEvent) -> Void) {
        self.configuration = configuration
        let (activity, activityContinuation) = AsyncStream<ServerActivity>.makeStream()
        self.activity = activity
        environment = SenderEnvironment(
            logger: logger, emit: emitEvent, describePeer: describePeer, bluetoothStillUp: bluetoothStillUp,
            linkExposure: linkExposure, disconnectDevice: disconnectDevice, deliveries: deliveries,
            activity: activityContinuation)
        hellos = HelloRegistry(capacity: configuration.helloCapacity, lifetime: configuration.helloLifetime)
        (starts, startContinuation) = AsyncStream<SenderConnectionShell>.makeStream()
    }

    /// Runs each connection this server starts as a child task, until the server is shut down and the last one ended.
    func runConnections() async {
        await withDiscardingTaskGroup { group in
            for await connection in starts {
                group.addTask {
                    let outcome = await connection.run()
                    await self.ended(outcome)
                }
            }
        }
        // Cancelled before a connection it was handed ran: nothing will end it.
        current = nil
        resumeEndWaiters()
    }

    /// How the fallback path notifies (`PropertiesChanged` on `Value` of the service's characteristic at that index).
    func attachFallbackEmitter(_ emit: @escaping @Sendable (_ value: [UInt8], _ characteristic: Int) throws -> Void) {
        fallbackEmit = emit
    }

    /// The message the next subscriber gets; nil serves nothing.
    func offer(_ message: OutgoingMessage?, sequence: Int) {
        offered = message.map { SenderConnection.Offer($0, sequence: sequence) }
    }

    /// A message is offered to the next subscriber (none after a multi session counted its last, until the next offer).
    var hasOffer: Bool { offered != nil }

    // MARK: Calls from BlueZ

    /// BlueZ called `AcquireNotify`: a central subscribed and `socket` carries our values. `indications`: the
    /// characteristic carries indications, and each value waits for the previous one's confirmation.
    func acceptSocket(_ socket: NotificationSocket, device: DeviceReference?, indications: Bool = false) {
        guard !isShutDown else {
            socket.close()
            return
        }
        if current != nil {
            // BlueZ 5.66 keeps one notify session per characteristic, so this is a newer
            // BlueZ or a confused one; one central at a time, the other is refused.
            environment.emit(.warning("a second central subscribed while one is being served; refused it"))
            centralTurnedAway()
            socket.close()
            return
        }
        // A few values of queue on our side is enough: bluetoothd reads greedily, and a small
        // buffer keeps progress (and EAGAIN) close to what bluetoothd actually took.
        do {
            try socket.setSendBufferSize(max(2048, 8 * socket.mtu))
        } catch { environment.logger.debug("could not shrink the notification socket's send buffer: \(error)") }
        let hello = device.map { hellos.hello(from: $0, at: .now) } ?? .none
        if !start(link: .notificationSocket(socket), device: device, hello: hello, indications: indications) {
            socket.close()
        }
    }

    /// BlueZ called `StartNotify` (no AcquireNotify offered, or a stack not using it). `device`: the subscriber when
    /// the caller could tell (the only connected device); `characteristic`: the index subscribed to.
    func acceptFallback(device: DeviceReference?, characteristic: Int = 0, indications: Bool = false) {
        guard !isShutDown, current == nil, let emitOn = fallbackEmit else { return }
        let emit: @Sendable ([UInt8]) throws -> Void = { try emitOn($0, characteristic) }
        let hello = device.map { hellos.hello(from: $0, at: .now) } ?? hellos.mostRecent(at: .now)?.hello ?? .none
        let valueLength = device.flatMap { mtus[$0] }.map { LinkPacking.gattValueLength(atMost: WireFormat.valueLength(forATTMTU: $0)) }
            ?? WireFormat.minimumValueLength
        let channel = PropertiesChangedNotificationChannel(
            maximumValueLength: valueLength, interval: configuration.fallbackValueInterval, emit: emit)
        _ = start(link: .propertiesChanged(channel), device: device, hello: hello, indications: indications)
    }

    /// A central opened our L2CAP channel and wrote `hello` (a version-2 HELLO offering
    /// `channel`) as its first SDU: the session runs on `socket` both ways. Refused (closed) while
    /// another central is served or nothing is offered, as a second subscription would be.
    func acceptChannel(_ socket: NotificationSocket, device: DeviceReference, hello: HelloV2) {
        guard !isShutDown, current == nil else {
            if current != nil {
                // As a second subscription would be (BlueZ 5.66 would not even let it subscribe).
                environment.emit(.centralDropped(environment.describePeer(device), reason: "it opened the L2CAP channel "
                    + "while another central is served; one at a time, advertising resumes when that one is done"))
                centralTurnedAway()
            }
            socket.close()
            return
        }
        if !start(link: .l2capChannel(socket), device: device, hello: .version2(hello), indications: false) {
            socket.close()
        }
    }

    /// bluetoothd reported an indication confirmed by the subscriber (`Confirm`).
    func indicationConfirmed() { current?.inputs.yield(.confirmed) }

    /// BlueZ called `StopNotify`: the (last) subscriber of the fallback path left.
    func fallbackStopped() {
        guard let serving = current, serving.link.kind == .propertiesChanged else { return }
        hungUp(serving, reason: "the central unsubscribed")
    }

    /// A central wrote `value` to our characteristic. `connectedDevices`: the devices connected
    /// now, asked only when the HELLO table is full (nil: unknown, every entry may make room).
    func write(_ value: [UInt8], device: DeviceReference?, mtu: Int?,
               connectedDevices: (@Sendable () -> [DeviceReference])? = nil) {
        if let device, let mtu {
            if mtus[device] == nil && mtus.count >= configuration.helloCapacity * 4 {
                mtus.removeAll()   // bounded; MTUs are re-learnt from the next writes
            }
            mtus[device] = mtu
        }
        // While a secure session is subscribed, all its central writes are that session's stream values, never a HELLO.
        if let serving = current, serving.takesWrites, device == nil || serving.device == nil || device == serving.device {
            serving.inputs.yield(.written(value))
            return
        }
        let version2 = HelloV2(parsing: value)
        if version2 != nil || RetiredVersion1.isHello(value) {
            guard let device else {
                environment.logger.debug("ignored a HELLO without a device")
                return
            }
            var connected: Set<DeviceReference>?
            let kept = hellos.record(version2.map { .version2($0) } ?? .retired, from: device, at: .now) { other in
                if connected == nil { connected = Set(connectedDevices?() ?? []) }
                return connected?.contains(other) == true
            }
            if let served = current?.device, served != device { centralTurnedAway() }
            guard kept else {
                environment.logger.debug("dropped a HELLO from \(device): the HELLO table is full of connected devices' entries")
                return
            }
            environment.logger.debug("HELLO from \(device): \(version2.map { "version 2, session \($0.session)" } ?? "the retired version 1")")
            return
        }
        environment.logger.debug("ignored a \(value.count)-byte write from \(device?.description ?? "an unknown device"): not a HELLO")
    }

    /// The device at `device` disconnected (or vanished). `noneConnected`: no device is
    /// connected to the adapter any more, which ends a subscription whose device is unknown.
    func deviceDisconnected(_ device: DeviceReference, noneConnected: Bool) {
        hellos.forget(device)
        mtus[device] = nil
        guard let serving = current else { return }
        if serving.device == device || (serving.device == nil && noneConnected) {
            hungUp(serving, reason: "the central disconnected")
        }
    }

    /// Ends everything (adapter left `poweredOn`, run over); aborts a transfer under way, uncounted, and awaits it.
    func shutDown(reason: String) async {
        guard !isShutDown else { return }
        isShutDown = true
        offered = nil
        startContinuation.finish()
        if let serving = current {
            serving.inputs.yield(.shutDown(reason: reason))
            await withCheckedContinuation { endWaiters.append($0) }
        }
        environment.activity.finish()
    }

    // MARK: Connections

    /// The central at `device` (or the only one) ended its subscription; we stop sending at once (the device is gone,
    /// or BlueZ stopped a PropertiesChanged subscription). What bluetoothd took is read before closing.
    private func hungUp(_ serving: Serving, reason: String) {
        serving.inputs.yield(.hungUp(reason: reason, drainedWhenClosed: serving.link.channel.isDrained))
    }

    /// Another central was refused while one is served: the session under way starts no new message (`SessionShare`).
    private func centralTurnedAway() { current?.inputs.yield(.centralTurnedAway) }

    /// Starts serving `link`'s subscriber; false when it is not served (the link is the caller's to close).
    private func start(link: SenderLink, device: DeviceReference?, hello: SenderConnection.CentralHello,
                       indications: Bool) -> Bool {
        guard let offer = offered else {
            environment.logger.debug("a central subscribed while there is nothing to send; ignored")
            return false
        }
        let channel = link.channel
        // `--value-size` shapes GATT values (Apple's 20 bytes); a channel's SDUs are its own.
        // Either way the default fills whole link-layer packets (LinkPacking).
        let valueLength = link.overChannel
            ? LinkPacking.channelValueLength(atMost: min(channel.maximumValueLength, SequencedStream.channelValueLengths.upperBound))
            : configuration.valueSizeLimit.map { min($0, channel.maximumValueLength) }
                ?? LinkPacking.gattValueLength(atMost: channel.maximumValueLength)
        let peer = environment.describePeer(device)
        // Apple's values to a central whose link may reorder them: said at the start.
        let exposure = hello == .none && !indications ? environment.linkExposure(peer.address) : nil
        let reorderRisk = exposure.flatMap { $0.mayReorder ? $0.summary : nil }
        let started = SenderConnection.start(
            peer: peer, offer: offer, hello: hello,
            link: SenderConnection.Link(valueLength: valueLength, overChannel: link.overChannel, indications: indications),
            keys: SenderConnection.Keys(identity: configuration.secureMode.identity,
                                        authorizedPeers: configuration.secureMode.authorizedPeers,
                                        requiresSecure: configuration.secureMode.requiresSecure),
            settings: configuration.connectionSettings, reorderRisk: reorderRisk)
        guard case .started(let machine, let actions) = started else {
            if case .refused(let reason) = started {
                // One line naming the central, no value sent, its link dropped.
                environment.emit(.centralDropped(peer, reason: reason))
                environment.disconnect(device)
            }
            return false
        }
        let id = nextID
        nextID += 1
        environment.emit(link.overChannel ? .subscribed(peer, mtu: machine.valueLength, format: machine.format, transport: .l2cap)
                                          : .subscribed(peer, mtu: machine.valueLength + 3, format: machine.format))
        if !channel.hasBackPressure {
            environment.logger.debug("serving \(peer.address) through PropertiesChanged (no AcquireNotify): values paced, no back-pressure")
        }
        environment.activity.yield(.subscribed(peer))
        if let reorderRisk {
            environment.emit(.warning("Apple's format to \(peer.address) over a link that has \(reorderRisk): BlueZ may "
                + "deliver its values out of order and the central cannot tell. Set [GATT] Channels = 1 in "
                + "/etc/bluetooth/main.conf on either host (bletransfer status shows the setting)"))
        }
        let (inputs, post) = AsyncStream<SenderConnection.Input>.makeStream()
        current = Serving(id: id, device: device, link: link, inputs: post,
                          takesWrites: machine.format == .secure && !link.overChannel)
        startContinuation.yield(SenderConnectionShell(
            id: id, machine: machine, startActions: actions, link: link, device: device, inputs: inputs, post: post,
            environment: environment))
        return true
    }

    /// A connection ended: the characteristic is free, and what it delivered is offered no more (a new subscriber must
    /// not get and count it again before the next offer); a message it took from the source stays offered.
    private func ended(_ outcome: ConnectionOutcome) {
        guard current?.id == outcome.id else { return }
        current = nil
        if let sequence = offered?.sequence, outcome.deliveredSequences.contains(sequence) { offered = nil }
        if let taken = outcome.offerTaken, !isShutDown { offered = taken }
        if outcome.announce { environment.activity.yield(.subscriptionEnded) }
        resumeEndWaiters()
    }

    private func resumeEndWaiters() {
        for waiter in endWaiters { waiter.resume() }
        endWaiters = []
    }
}

extension PeripheralConfiguration {
    var connectionSettings: SenderConnection.Settings {
        SenderConnection.Settings(
            delivery: SubscriptionDelivery.Limits(
                acknowledgementTimeout: acknowledgementTimeout, unsubscribeTimeout: unsubscribeTimeout,
                acknowledgementGrace: acknowledgementGrace, compatConfirmationDelay: compatConfirmationDelay),
            deadline: TransferDeadline(minimumRate: minimumTransferRate, floor: transferTimeFloor),
            handshakeTimeout: handshakeTimeout, progressInterval: progressInterval,
            sessionMessageLimit: sessionMessageLimit, sessionByteLimit: sessionByteLimit)
    }
}
