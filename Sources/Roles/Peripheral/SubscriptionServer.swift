import BlueZ
import Logging
import Machines
import Storage
import Transfer
import Trust

/// What the subscription server tells the engine that drives advertising and the message
/// source.
enum ServerActivity: Sendable {
    /// A central subscribed and is being served.
    case subscribed(PeerDescription)
    /// The offered message counts as delivered: acknowledged (framed), or unsubscribed after
    /// `EOM` was written (compat). Nothing is offered until the engine offers the next one.
    case delivered(OutgoingMessage, MessageSummary, to: PeerDescription)
    /// The subscription is over (delivered or not); the characteristic is free again.
    case subscriptionEnded
    /// An authorized central was refused because the offered message is addressed to another
    /// peer: the engine may offer a message for this one instead, for its next visit.
    case addressedElsewhere(AuthenticatedPeer)
}

/// The peripheral's GATT-side logic for one registration period, free of D-Bus: it takes the
/// calls BlueZ makes on our characteristic (a write, `AcquireNotify`, `StartNotify`,
/// `StopNotify`) plus device disconnections and accepted L2CAP channels, serves the offered
/// message to one subscriber at a time from byte 0, and decides when it counts as delivered.
///
/// Each subscription is one connection: its `SenderLink` (the AcquireNotify socket, the
/// PropertiesChanged fallback or the L2CAP channel) and one task (`runConnection`) that runs
/// the transfer, reads the link's inbound side and fires the delivery's timers. This actor
/// keeps the current subscription, routes BlueZ's calls for it (the device's writes go to the
/// session's `WriteInbox`, `Confirm` to the confirmations) and performs what the delivery
/// machine answers.
///
/// Delivery rules (the decision is `SubscriptionDelivery`, a pure state machine):
/// - framed (a version-2 HELLO offering the encrypted session): delivered on the sealed ACK
///   only the receiver that stored the message can produce, once every value was handed to
///   BlueZ; a hang-up after END waits `acknowledgementGrace` for a late ACK. A central that
///   offers the retired version 1, or the framed protocol without encryption, gets one
///   `centralDropped` line and nothing else; so does any non-secure subscriber (or an
///   unlisted key) when the policy requires the secure mode, and its link is disconnected.
/// - compat: delivered when the central unsubscribes (or disconnects) after `EOM` was written
///   (bluetoothd read it from the socket, `NotificationChannel.drain`) and Bluetooth is still
///   up `compatConfirmationDelay` later (the adapter going off looks like an unsubscription).
/// - A subscription that ends earlier counts nothing; the next subscriber starts at byte 0.
///
/// Bounds (a central in range may be broken or hostile): the message within
/// `transferDeadline(forWireBytes:)`, then the framed ACK within `acknowledgementTimeout` or
/// the compat unsubscription within `unsubscribeTimeout`. A central that misses its bound is
/// dropped: nothing counts, the channel is closed, the link disconnected (`disconnectDevice`).
/// Outside a session, a write that is not a HELLO is ignored (logged at debug level); nothing
/// a central writes is stored beyond the bounded HELLO table.
actor SubscriptionServer {
    private struct Subscription {
        let id: Int
        /// The device, when BlueZ said who subscribed.
        let device: DeviceReference?
        let peer: PeerDescription
        /// The message being served (in a multi session, the current one).
        var message: OutgoingMessage
        var sequence: Int
        let format: TransferFormat
        let link: SenderLink
        /// When the current message started (the subscription's start for the first).
        var startedAt: ContinuousClock.Instant
        /// The fairness rule's count: what this session has carried, and whether another
        /// central was turned away meanwhile.
        var share: SessionShare
        /// Messages counted as delivered in this subscription (multi).
        var deliveredInSession: Int { share.messages }
        /// When the current message's progress is reported, and its rate.
        var progress: ProgressReports
        /// Whether the message counts as delivered, and what to do next.
        var delivery: SubscriptionDelivery
        /// The connection's task (`runConnection`): the transfer, the link's reader, the timers.
        var connection: Task<Void, Never>?
        /// Where the delivery's timers are started (`runConnection` runs them); a timer fires
        /// only while its generation is the one armed here (a cancelled or restarted one is not).
        let timerRequests: AsyncStream<TimerRequest>.Continuation
        var armedTimers: [SubscriptionDelivery.Timer: Int] = [:]
        /// Compat only: the link was seen with (or could have) several ATT bearers, so the
        /// central may get the values out of order (sticky once seen).
        var orderingRisk: EnhancedATTExposure?
        /// Values travel as indications and the next leaves only after bluetoothd reported
        /// the previous one confirmed (`indicationConfirmed`): the order survives any number
        /// of ATT bearers. Where those reports go.
        var confirmations: AsyncStream<Void>.Continuation?
        /// Secure mode: the central's writes during the session, posted straight in for the
        /// transfer task to read; interrupted on a hang-up, so that a session paused for the
        /// central (its handshake, a PROGRESS) stops.
        var writeInbox: WriteInbox? = nil
        /// Secure mode: the central the handshake authenticated.
        var authenticatedPeer: AuthenticatedPeer?
        /// Secure mode: the session's payload bytes on the air already added to
        /// `payloadBytesOnAir`.
        var sessionBytesOnAirCounted = 0
        /// Resume: the offset the current message continued from.
        var resumedFrom: Int?
    }

    /// A delivery timer started (`SubscriptionDelivery.Action.startTimer`); `generation` tells
    /// it from a later start of the same timer.
    struct TimerRequest: Sendable {
        let timer: SubscriptionDelivery.Timer
        let duration: Duration
        let generation: Int
    }

    /// What a central wrote before it subscribed: its HELLO, and the same read as version 2.
    struct CentralHello: Sendable {
        var hello: Hello?
        var version2: HelloV2?
    }

    private let configuration: PeripheralConfiguration
    private let logger: Logger
    private let emitEvent: @Sendable (RoleEvent) -> Void
    private let describePeer: @Sendable (DeviceReference?) -> PeerDescription
    private let bluetoothStillUp: @Sendable () -> Bool
    private let linkExposure: @Sendable (_ address: String) -> EnhancedATTExposure
    private let disconnectDevice: @Sendable (_ device: DeviceReference) async -> Void
    private let continueSession: ContinueSession
    /// Pipeline: the message that follows the one awaiting its ACK and the `sentAhead` after
    /// it, ready now (nil: none; `MessageSource.upcomingNow(skipping:)`).
    private let upcomingInSession: @Sendable (_ sentAhead: Int) async -> OutgoingMessage?
    private var fallbackEmit: (@Sendable (_ value: [UInt8], _ characteristic: Int) throws -> Void)?

    /// A multi session's message was acknowledged: count it as delivered (the source, the
    /// counter, the `delivered` event) and, when `wantsNext`, return the next message ready now
    /// with its sequence number (nil: none now, the session closes).
    typealias ContinueSession = @Sendable (_ delivered: OutgoingMessage, _ summary: MessageSummary,
                                           _ peer: PeerDescription, _ wantsNext: Bool) async
        -> (message: OutgoingMessage, sequence: Int)?

    nonisolated let activity: AsyncStream<ServerActivity>
    private let activityContinuation: AsyncStream<ServerActivity>.Continuation

    private var offered: (message: OutgoingMessage, sequence: Int)?
    private var hellos: HelloRegistry<DeviceReference>
    /// ATT MTU by device, from the options of their writes: the StartNotify path gets no MTU,
    /// and a value longer than MTU − 3 would be cut by bluetoothd without a word.
    private var mtus: [DeviceReference: Int] = [:]
    private var current: Subscription?
    /// Secure mode: payload bytes notified per message (by SHA-256) over all visits of this
    /// process until it is delivered: what resume saves shows here. Bounded (cleared past
    /// `onAirMemory` messages).
    private var payloadBytesOnAir: [[UInt8]: Int] = [:]
    static let onAirMemory = 1024
    private var nextID = 1
    private var nextTimerGeneration = 0
    private var isShutDown = false
    /// The unauthenticated-key notice was given (once per run).
    private var unauthenticatedNoticed = false

    init(configuration: PeripheralConfiguration, logger: Logger,
         describePeer: @escaping @Sendable (DeviceReference?) -> PeerDescription,
         bluetoothStillUp: @escaping @Sendable () -> Bool = { true },
         linkExposure: @escaping @Sendable (_ address: String) -> EnhancedATTExposure = { GATTBearers.exposure(to: $0) },
         disconnectDevice: @escaping @Sendable (_ device: DeviceReference) async -> Void = { _ in },
         continueSession: @escaping ContinueSession = { _, _, _, _ in nil },
         upcomingInSession: @escaping @Sendable (_ sentAhead: Int) async -> OutgoingMessage? = { _ in nil },
         emitEvent: @escaping @Sendable (RoleEvent) -> Void) {
        self.upcomingInSession = upcomingInSession
        self.configuration = configuration
        self.logger = logger
        self.describePeer = describePeer
        self.bluetoothStillUp = bluetoothStillUp
        self.linkExposure = linkExposure
        self.disconnectDevice = disconnectDevice
        self.continueSession = continueSession
        self.emitEvent = emitEvent
        self.hellos = HelloRegistry(capacity: configuration.helloCapacity, lifetime: configuration.helloLifetime)
        (activity, activityContinuation) = AsyncStream<ServerActivity>.makeStream()
    }

    /// How the fallback path notifies (`PropertiesChanged` on the `Value` of the
    /// characteristic at that index of the service).
    func attachFallbackEmitter(_ emit: @escaping @Sendable (_ value: [UInt8], _ characteristic: Int) throws -> Void) {
        fallbackEmit = emit
    }

    /// The message the next subscriber gets; nil serves nothing.
    func offer(_ message: OutgoingMessage?, sequence: Int) {
        offered = message.map { ($0, sequence) }
    }

    var isServing: Bool { current != nil }

    /// A message is offered to the next subscriber (after a multi session counted its last
    /// message, none is until the engine offers one).
    var hasOffer: Bool { offered != nil }

    // MARK: Calls from BlueZ

    /// BlueZ called `AcquireNotify`: a central subscribed and `socket` carries our values.
    /// `indications`: the characteristic carries indications, and each value waits for the
    /// previous one's confirmation.
    func acceptSocket(_ socket: NotificationSocket, device: DeviceReference?, indications: Bool = false) {
        guard !isShutDown else {
            socket.close()
            return
        }
        if current != nil {
            // BlueZ 5.66 keeps one notify session per characteristic, so this is a newer
            // BlueZ or a confused one; one central at a time, the other is refused.
            emitEvent(.warning("a second central subscribed while one is being served; refused it"))
            centralTurnedAway()
            socket.close()
            return
        }
        let hello = CentralHello(hello: device.flatMap { hellos.hello(from: $0, at: .now) },
                                 version2: device.flatMap { hellos.version2Hello(from: $0, at: .now) })
        // A few values of queue on our side is enough: bluetoothd reads greedily, and a small
        // buffer keeps progress (and EAGAIN) close to what bluetoothd actually took.
        do {
            try socket.setSendBufferSize(max(2048, 8 * socket.mtu))
        } catch {
            logger.debug("could not shrink the notification socket's send buffer: \(error)")
        }
        if !start(link: .notificationSocket(socket), device: device, hello: hello, indications: indications) {
            socket.close()
        }
    }

    /// BlueZ called `StartNotify` (no AcquireNotify offered, or a stack that does not use it).
    /// `device` is the subscriber when the caller could tell (the only connected device).
    /// `characteristic`: the index of the characteristic subscribed to.
    func acceptFallback(device: DeviceReference?, characteristic: Int = 0, indications: Bool = false) {
        guard !isShutDown, current == nil, let emitOn = fallbackEmit else { return }
        let emit: @Sendable ([UInt8]) throws -> Void = { try emitOn($0, characteristic) }
        let hello: CentralHello
        if let device {
            hello = CentralHello(hello: hellos.hello(from: device, at: .now),
                                 version2: hellos.version2Hello(from: device, at: .now))
        } else {
            let recent = hellos.mostRecent(at: .now)
            hello = CentralHello(hello: recent?.hello, version2: recent?.version2)
        }
        let valueLength = device.flatMap { mtus[$0] }.map(WireFormat.valueLength(forATTMTU:))
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
                emitEvent(.centralDropped(describePeer(device), reason: "it opened the L2CAP channel while another "
                    + "central is served; one at a time, advertising resumes when that one is done"))
                centralTurnedAway()
            }
            socket.close()
            return
        }
        let centralHello = CentralHello(hello: Hello(version: HelloV2.version, session: SessionID(rawValue: hello.session)),
                                        version2: hello)
        if !start(link: .l2capChannel(socket), device: device, hello: centralHello, indications: false) {
            socket.close()
        }
    }

    /// bluetoothd reported an indication confirmed by the subscriber (`Confirm`).
    func indicationConfirmed() {
        current?.confirmations?.yield()
    }

    /// BlueZ called `StopNotify`: the (last) subscriber of the fallback path left.
    func fallbackStopped() {
        guard let subscription = current, !subscription.link.usesSocket else { return }
        hungUp(subscription.id, reason: "the central unsubscribed", closeChannel: true)
    }

    /// A central wrote `value` (write without response) to our characteristic.
    /// `connectedDevices`: the devices connected now, asked only when the HELLO table is full
    /// (nil: unknown, every entry may make room).
    func write(_ value: [UInt8], device: DeviceReference?, mtu: Int?,
               connectedDevices: (@Sendable () -> [DeviceReference])? = nil) {
        if let device, let mtu {
            if mtus[device] == nil && mtus.count >= configuration.helloCapacity * 4 {
                mtus.removeAll()   // bounded; MTUs are re-learnt from the next writes
            }
            mtus[device] = mtu
        }
        // While a secure session is subscribed, everything its central writes is stream values
        // of that session (docs/wire-v2.md), never a HELLO.
        if let subscription = current, let inbox = subscription.writeInbox, !subscription.link.overChannel,
           device == nil || subscription.device == nil || device == subscription.device {
            inbox.post(value)
            return
        }
        if let hello = WireFormat.parseHello(value) {
            guard let device else {
                logger.debug("ignored a HELLO without a device")
                return
            }
            var connected: Set<DeviceReference>?
            let kept = hellos.record(hello, version2: HelloV2(parsing: value), from: device, at: .now) { other in
                if connected == nil { connected = Set(connectedDevices?() ?? []) }
                return connected?.contains(other) == true
            }
            if let served = current?.device, served != device { centralTurnedAway() }
            guard kept else {
                logger.debug("dropped a HELLO from \(device): the HELLO table is full of connected devices' entries")
                return
            }
            logger.debug("HELLO from \(device): framed version \(hello.version), session \(hello.session)")
            return
        }
        logger.debug("ignored a \(value.count)-byte write from \(device?.description ?? "an unknown device"): not a HELLO")
    }

    /// The device at `device` disconnected (or vanished). `noneConnected`: no device is
    /// connected to the adapter any more, which ends a subscription whose device is unknown.
    func deviceDisconnected(_ device: DeviceReference, noneConnected: Bool) {
        hellos.forget(device)
        mtus[device] = nil
        guard let subscription = current else { return }
        if subscription.device == device || (subscription.device == nil && noneConnected) {
            hungUp(subscription.id, reason: "the central disconnected", closeChannel: true)
        }
    }

    /// Ends everything: the adapter left `poweredOn`, or the run is over. A transfer under way
    /// is aborted (nothing counted).
    func shutDown(reason: String) {
        guard !isShutDown else { return }
        isShutDown = true
        offered = nil
        if let subscription = current {
            feed(.shutDown(reason: reason), to: subscription.id)
        }
        activityContinuation.finish()
    }

    // MARK: Serving one subscription

    /// Starts serving `link`'s subscriber; false when it is not served (the link is the
    /// caller's to close).
    private func start(link: SenderLink, device: DeviceReference?, hello centralHello: CentralHello,
                       indications: Bool) -> Bool {
        guard let (message, sequence) = offered else {
            logger.debug("a central subscribed while there is nothing to send; ignored")
            return false
        }
        let channel = link.channel
        // `--value-size` shapes GATT values (Apple's 20 bytes); a channel's SDUs are its own.
        let valueLength = link.overChannel
            ? min(channel.maximumValueLength, SequencedStream.channelValueLengths.upperBound)
            : configuration.valueSizeLimit.map { min($0, channel.maximumValueLength) } ?? channel.maximumValueLength
        let policy = configuration.secureMode
        // The framed protocol is always encrypted: a central offering it without encryption,
        // or offering the retired version 1, gets one line and nothing else. Apple's flow (no
        // HELLO) stays for peers that speak nothing else.
        if let version2 = centralHello.version2 {
            guard version2.offered.contains(.secure) else {
                refuse(device: device, reason: "it offered the framed protocol without encryption, which this "
                       + "bletransfer no longer speaks; update bletransfer on that host; nothing was sent")
                return false
            }
            return startVersion2(link: link, device: device, hello: version2, policy: policy, message: message,
                                 sequence: sequence, valueLength: valueLength, indications: indications)
        }
        if centralHello.hello != nil {
            refuse(device: device, reason: Self.version1Refusal)
            return false
        }
        if policy.requiresSecure || message.addressee != nil {
            let serves = message.addressee != nil ? "the message under way is addressed to an authorized peer"
                : "this sender serves authorized peers only"
            refuse(device: device, reason: "it did not offer the secure mode (Apple's flow, no HELLO); \(serves), nothing was sent")
            return false
        }
        let sender = MessageSender(message: message, replyingTo: nil, maximumValueLength: valueLength)
        begin(link: link, device: device, message: message, sequence: sequence, format: .compat,
              valueLength: sender.maximumValueLength, valueCount: sender.valueCount,
              indications: indications) { id, confirmations in
            await Self.transfer(sender, over: channel, confirmations: confirmations, subscription: id, server: self)
        }
        return true
    }

    /// Starts serving one subscription: its delivery, events, its connection's task (running
    /// `transfer`, given the subscription's id and, with indications, the confirmations) and
    /// its deadline.
    fileprivate func begin(link: SenderLink, device: DeviceReference?, message: OutgoingMessage, sequence: Int,
                           format: TransferFormat, valueLength: Int, valueCount: Int, indications: Bool,
                           writeInbox: WriteInbox? = nil, transfer: @escaping Transfer) {
        let id = nextID
        nextID += 1
        let peer = describePeer(device)
        let limits = SubscriptionDelivery.Limits(
            acknowledgementTimeout: configuration.acknowledgementTimeout,
            unsubscribeTimeout: configuration.unsubscribeTimeout,
            acknowledgementGrace: configuration.acknowledgementGrace,
            compatConfirmationDelay: configuration.compatConfirmationDelay)
        let (timers, timerRequests) = AsyncStream<TimerRequest>.makeStream()
        var subscription = Subscription(
            id: id, device: device, peer: peer, message: message, sequence: sequence, format: format,
            link: link, startedAt: .now, share: SessionShare(messageLimit: configuration.sessionMessageLimit,
                               byteLimit: configuration.sessionByteLimit),
            progress: ProgressReports(totalBytes: message.byteCount, interval: configuration.progressInterval),
            delivery: SubscriptionDelivery(format: format, confirmsIndications: indications,
                                           totalBytes: message.byteCount, limits: limits),
            timerRequests: timerRequests, writeInbox: writeInbox)
        emitEvent(link.overChannel ? .subscribed(peer, mtu: valueLength, format: format, transport: .l2cap)
                              : .subscribed(peer, mtu: valueLength + 3, format: format))
        if !link.channel.hasBackPressure {
            logger.debug("serving \(peer.address) through PropertiesChanged (no AcquireNotify): values paced, no back-pressure")
        }
        activityContinuation.yield(.subscribed(peer))
        var confirmations: Confirmations?
        if indications {
            // bluetoothd confirms one indication at a time; a few spare places cost nothing.
            confirmations = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(16))
            subscription.confirmations = confirmations?.continuation
            logger.debug("serving \(peer.address) with confirmed indications: one value in flight")
        }
        let server = self
        // Unstructured: the connection outlives this actor call, which BlueZ made; the
        // subscription holds it and cancels it when the delivery stops the transfer.
        subscription.connection = Task {
            await Self.runConnection(id, link: link, server: server, timers: timers, confirmations: confirmations,
                                     writeInbox: writeInbox, transfer: transfer)
        }
        if format == .compat, !indications, let risk = compatOrderingRisk(&subscription) {
            emitEvent(.warning("Apple's format to \(peer.address) over a link that \(risk.reason): BlueZ may deliver "
                + "its values out of order and the central cannot tell. Set [GATT] Channels = 1 in "
                + "/etc/bluetooth/main.conf on either host (bletransfer status shows the setting)"))
        }
        armTransferDeadline(&subscription, valueCount: valueCount, valueLength: valueLength, indications: indications)
        current = subscription
    }

    /// Indication confirmations: read by the transfer, posted by BlueZ's `Confirm` calls and
    /// the link's reader.
    typealias Confirmations = (stream: AsyncStream<Void>, continuation: AsyncStream<Void>.Continuation)

    /// The transfer, a child of the subscription's connection task: it sends the message (or
    /// session) over the link and reports to the server.
    typealias Transfer = @Sendable (_ id: Int, _ confirmations: AsyncStream<Void>?) async -> Void

    /// One connection, one task: the transfer, the reader of the link's inbound side (its end
    /// is the central's hang-up) and the delivery's timers. The reader and timers stop once the
    /// timer requests end (the subscription ended); the transfer stops when done or cancelled
    /// (`cancelTransfer`), not before: a multi session's last ACK may still be being counted.
    private static func runConnection(_ id: Int, link: SenderLink, server: SubscriptionServer,
                                      timers: AsyncStream<TimerRequest>,
                                      confirmations: Confirmations?,
                                      writeInbox: WriteInbox?, transfer: @escaping Transfer) async {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await transfer(id, confirmations?.stream)
                // Over a channel the transfer ends once nothing more will be sent or read: closing
                // our end tells the central its last ACK arrived (it has no reply of its own).
                if link.overChannel { link.channel.close() }
            }
            await withDiscardingTaskGroup { inputs in
                if let read = link.read {
                    inputs.addTask {
                        await read(confirmations?.continuation, writeInbox)
                        await server.hungUp(id, reason: link.hangUpReason, closeChannel: false)
                    }
                }
                for await request in timers {
                    inputs.addTask {
                        try? await Task.sleep(for: request.duration)
                        guard !Task.isCancelled else { return }
                        await server.timerFired(request, subscription: id)
                    }
                }
                inputs.cancelAll()
            }
        }
    }

    /// Arms the bound for the subscription's current message: its values at the minimum rate
    /// (and, in a multi session, its ACK: the stream pauses for it before the next message).
    private func armTransferDeadline(_ subscription: inout Subscription, valueCount: Int, valueLength: Int,
                                     indications: Bool) {
        guard let limit = configuration.transferDeadline(forWireBytes: valueCount * valueLength,
                                                         confirmedValues: indications ? valueCount : 0) else { return }
        let pace = indications
            ? "at least \(configuration.minimumTransferRate) bytes/s or a confirmed value every \(PeripheralConfiguration.confirmedValueAllowance.seconds) s"
            : "at least \(configuration.minimumTransferRate) bytes/s"
        let actions = subscription.delivery.begin(
            transferDeadline: limit,
            reason: "it did not take the \(subscription.message.byteCount)-byte message within \(SubscriptionDelivery.describe(limit)) (\(pace), --min-rate)")
        perform(actions, on: &subscription)
    }

    /// Feeds `input` to subscription `id`'s delivery (if it is the current one) and performs
    /// what it answers.
    private func feed(_ input: SubscriptionDelivery.Input, to id: Int) {
        guard var subscription = current, subscription.id == id else { return }
        perform(subscription.delivery.handle(input), on: &subscription)
        current = subscription.delivery.isOver ? nil : subscription
    }

    /// Carries out the delivery's actions: the I/O, timers and events it does not do itself.
    private func perform(_ actions: [SubscriptionDelivery.Action], on subscription: inout Subscription) {
        var queue = actions[...]
        while let action = queue.popFirst() {
            switch action {
            case .deliver:
                deliver(&subscription)
            case .reportAborted(let reason):
                emitEvent(.transferAborted(subscription.peer, reason: reason))
            case .reportDropped(let reason):
                emitEvent(.centralDropped(subscription.peer, reason: reason))
            case .startTimer(let timer, let duration):
                nextTimerGeneration += 1
                subscription.armedTimers[timer] = nextTimerGeneration
                subscription.timerRequests.yield(TimerRequest(timer: timer, duration: duration,
                                                              generation: nextTimerGeneration))
            case .cancelTimer(let timer):
                subscription.armedTimers[timer] = nil
            case .cancelTransfer:
                subscription.connection?.cancel()
            case .finishConfirmations:
                subscription.confirmations?.finish()
            case .closeChannel:
                subscription.link.channel.close()
            case .checkBluetoothNow:
                queue.append(contentsOf: subscription.delivery.handle(.compatConfirmationDue(bluetoothUp: bluetoothStillUp())))
            case .disconnect:
                if let device = subscription.device { disconnectLater(device) }
            case .end(let announce):
                subscription.writeInbox?.finish()
                subscription.timerRequests.finish()
                if announce { activityContinuation.yield(.subscriptionEnded) }
            }
        }
    }

    private func timerFired(_ request: TimerRequest, subscription id: Int) {
        guard let subscription = current, subscription.id == id,
              subscription.armedTimers[request.timer] == request.generation else { return }
        current?.armedTimers[request.timer] = nil
        feed(.timerFired(request.timer), to: id)
    }

    /// Drops `device`'s link without holding the actor.
    private func disconnectLater(_ device: DeviceReference) {
        let disconnect = disconnectDevice
        // Unstructured: the disconnection must not hold the actor, and must reach bluetoothd
        // even though the connection whose timer asked for it is being cancelled.
        Task { await disconnect(device) }
    }

    /// Whether the central of a compat subscription may get values out of order: its link has,
    /// or may have, Enhanced ATT bearers. Asked at the start and at the end (a central opens its
    /// EATT channels after service discovery); once seen, it stays.
    private func compatOrderingRisk(_ subscription: inout Subscription) -> CompatOrdering? {
        if subscription.orderingRisk == nil {
            let exposure = linkExposure(subscription.peer.address)
            if exposure.mayReorder { subscription.orderingRisk = exposure }
        }
        return subscription.orderingRisk.map { .atRisk(because: "has \($0.summary)") }
    }

    /// Sends every value of `sender` in order, then drains the channel. Runs outside the actor
    /// so that waiting for room on the socket does not hold up writes and hang-ups. With
    /// `confirmations`, each value waits for the previous one's confirmation, and the last
    /// (`EOM`) for its own: confirmed means the central's host received it, in order.
    private static func transfer(_ sender: MessageSender, over channel: any NotificationChannel,
                                 confirmations: AsyncStream<Void>?, subscription id: Int,
                                 server: SubscriptionServer) async {
        var sender = sender
        var confirmed = confirmations?.makeAsyncIterator()
        do {
            while let value = sender.nextValue() {
                try await channel.send(value)
                if confirmed != nil {
                    // Ends (nil) when the subscription ends or this task is cancelled.
                    guard await confirmed?.next() != nil else { throw NotificationSocketError.closed }
                }
                await server.progressed(id, bytesSent: sender.bytesSent, finished: sender.isFinished)
            }
            // The file failed or shrank while sent: no `EOM`, so the central keeps nothing.
            if let failure = sender.readFailure { throw failure }
            try await channel.drain()
            await server.endOfMessageWritten(id)
        } catch {
            await server.transferFailed(id, error)
        }
    }

    fileprivate func progressed(_ id: Int, bytesSent: Int, finished: Bool, sessionBytesOnAir: Int? = nil) {
        guard var subscription = current, subscription.id == id else { return }
        if let sessionBytesOnAir, sessionBytesOnAir > subscription.sessionBytesOnAirCounted {
            if payloadBytesOnAir[subscription.message.digest] == nil, payloadBytesOnAir.count >= Self.onAirMemory {
                payloadBytesOnAir = [:]
            }
            payloadBytesOnAir[subscription.message.digest, default: 0] += sessionBytesOnAir - subscription.sessionBytesOnAirCounted
            subscription.sessionBytesOnAirCounted = sessionBytesOnAir
        }
        if subscription.progress.record(bytesSent: bytesSent, at: .now - subscription.startedAt) {
            let meter = subscription.progress.meter
            emitEvent(.progress(subscription.peer, meter.progress, bytesPerSecond: meter.bytesPerSecond,
                                secondsRemaining: meter.estimatedRemaining.map(\.seconds)))
        }
        current = subscription
        feed(.valueHandedOver(bytesSent: bytesSent, last: finished), to: id)
    }

    fileprivate func endOfMessageWritten(_ id: Int) {
        guard let subscription = current, subscription.id == id else { return }
        let hungUp = subscription.delivery.hasHungUp
        feed(.endOfMessageWritten, to: id)
        if !hungUp {
            let awaited = subscription.format == .compat ? "the central to unsubscribe" : "the ACK"
            logger.debug("EOM written to \(subscription.peer.address); waiting for \(awaited)")
        }
    }

    fileprivate func transferFailed(_ id: Int, _ error: any Error) {
        guard current?.id == id else { return }
        let failure: SubscriptionDelivery.TransferFailure
        switch error {
        case NotificationSocketError.closedByPeer:
            failure = .closedByPeer
        case is CancellationError, NotificationSocketError.closed:
            failure = .stoppedByUs   // we stopped it; whoever did reports why
        default:
            failure = .other("\(error)")
        }
        feed(.transferFailed(failure), to: id)
    }

    /// The subscription ended from the central's side. `closeChannel`: stop sending at once
    /// (the device is gone, or BlueZ stopped a PropertiesChanged subscription); otherwise the
    /// channel found out by itself (the socket's peer closed) and its next step fails. What
    /// that means is the delivery's to decide (`SubscriptionDelivery`).
    private func hungUp(_ id: Int, reason: String, closeChannel: Bool) {
        guard let subscription = current, subscription.id == id, !subscription.delivery.hasHungUp else { return }
        var reason = reason
        if subscription.format == .secure, subscription.authenticatedPeer != nil, !subscription.delivery.isDelivered,
           subscription.deliveredInSession == 0 {
            // A receiver refuses an unlisted sender right after reading its key (message 3).
            reason += " after the secure handshake (it may not list this host's key; 'bletransfer id' prints it)"
        }
        // Read before the delivery asks for the channel to be closed.
        let drained = closeChannel ? subscription.link.channel.isDrained : nil
        feed(.hungUp(reason: reason, drainedWhenClosed: drained), to: id)
        // A transfer paused for the central (its handshake, a PROGRESS) would otherwise wait
        // for its deadline: no send fails while nothing is sent.
        subscription.writeInbox?.interrupt()
    }

    private func deliver(_ subscription: inout Subscription) {
        let summary = self.summary(of: &subscription)
        // Offered no more: until the engine offers the next message, a new subscriber must not
        // receive (and count) this one again.
        if offered?.sequence == subscription.sequence { offered = nil }
        activityContinuation.yield(.delivered(subscription.message, summary, to: subscription.peer))
    }

    private func summary(of subscription: inout Subscription) -> MessageSummary {
        MessageSummary(
            sequence: subscription.sequence, byteCount: subscription.message.byteCount, format: subscription.format,
            sha256: lowercaseHex(subscription.message.digest),
            duration: .now - subscription.startedAt,
            ordering: subscription.format == .compat && subscription.confirmations == nil
                ? compatOrderingRisk(&subscription) : nil,
            peerKey: subscription.authenticatedPeer,
            resumedFrom: subscription.resumedFrom,
            payloadBytesOnAir: subscription.writeInbox != nil ? payloadBytesOnAir.removeValue(forKey: subscription.message.digest) : nil)
    }
}


// MARK: Secure mode

extension SubscriptionServer {
    /// Serves `message` to a central that wrote a HELLO offering the encrypted session, with
    /// `policy`'s keys.
    fileprivate func startVersion2(link: SenderLink, device: DeviceReference?, hello: HelloV2, policy: SecureModePolicy,
                                   message: OutgoingMessage, sequence: Int, valueLength: Int, indications: Bool) -> Bool {
        let session: SecureSenderSession
        let wantsMulti = configuration.sessionMessageLimit > 1
        let handshakeTimeout = configuration.handshakeTimeout
        do {
            session = try SecureSenderSession(
                identity: policy.identity, authorizedPeers: policy.authorizedPeers.allowed(for: message), hello: hello,
                payload: message.body, digest: message.digest,
                metadata: Self.fileMetadata(message.file), maximumValueLength: valueLength, wantsMulti: wantsMulti,
                overChannel: link.overChannel)
        } catch {
            refuse(device: device, reason: "its framed version 2 session could not start: \(error)")
            return false
        }
        let inbox = WriteInbox(limit: Self.secureWriteBacklog)
        let channel = link.channel
        begin(link: link, device: device, message: message, sequence: sequence, format: .secure, valueLength: valueLength,
              valueCount: SecureSenderSession.estimatedValueCount(payloadLength: message.byteCount,
                                                                  maximumValueLength: valueLength,
                                                                  overChannel: link.overChannel),
              indications: indications, writeInbox: inbox) { id, confirmations in
            // The writes are read between notifications too (`WriteInbox.takeAvailable`): a RESUME
            // must take effect while DATA flows, not after the whole message went out.
            var transfer = SecureTransfer(session: session, id: id, server: self)
            do {
                try await transfer.run(over: channel, written: inbox, confirmations: confirmations,
                                       handshakeTimeout: handshakeTimeout)
            } catch let error as SecureSessionError {
                await self.secureSessionFailed(id, error)
            } catch {
                await self.transferFailed(id, error)
            }
        }
        return true
    }

    /// The HEADER's metadata for a named message (sent when the central offered `meta`). A name
    /// that is not a clean relative path of at most 255 bytes is not sent: the receiver then
    /// falls back to its generated name.
    static func fileMetadata(_ file: SentFileAttributes?) -> FileMetadata? {
        file.flatMap {
            FileMetadata(name: $0.name, modificationSeconds: $0.modificationSeconds,
                         modificationNanoseconds: $0.modificationNanoseconds)
        }
    }

    /// What the central's write meant to subscription `id`'s session, outside a multi
    /// session's ACK (`secureAcknowledgedInSession`): an authenticated key, a RESUME, the ACK of
    /// its one message, a CLOSE (it takes no more: a message under way is not counted and stays
    /// to be sent again; the central unsubscribes next) or a refusal.
    fileprivate func secureSessionEvent(_ event: SecureSenderSession.Event, subscription id: Int) {
        guard let subscription = current, subscription.id == id else { return }
        switch event {
        case .centralAuthenticated(let key):
            let peer = AuthenticatedPeer(key)
            current?.authenticatedPeer = peer
            if !peer.isListed, !unauthenticatedNoticed {
                unauthenticatedNoticed = true
                emitEvent(.warning(EventText.unauthenticatedNotice(peer: "the central", key: peer)))
            }
            logger.debug("secure session with \(subscription.peer.address): central authenticated as \(peer.fingerprint)")
        case .resumed(let offset):
            current?.resumedFrom = Int(offset)
            logger.info("\(subscription.peer.address) holds \(offset) bytes of message \(subscription.sequence) from an earlier visit: continuing from there")
        case .acknowledged:
            feed(.acknowledged, to: id)
        case .closedByCentral(let reason):
            let pending = subscription.delivery.isDelivered ? "" : "; message \(subscription.sequence) stays to be sent again"
            logger.info("\(subscription.peer.address) closed the session (reason \(reason)) after \(subscription.deliveredInSession) messages\(pending)")
            feed(.refusedByUs, to: id)
        case .refusedByCentral(let outcome):
            let why = outcome == 0x03 ? "its digest did not match" : "it is over the receiver's limits"
            emitEvent(.warning("\(subscription.peer.address) refused the message (\(why)); it stays to be sent again"))
            feed(.refusedByUs, to: id)
        }
    }

    /// Multi: the current message of subscription `id` was acknowledged before the stream's
    /// end. It counts as delivered now; returns the next message to send in this session, or
    /// nil when the session closes (none ready now, the fairness rule, or the central left).
    /// `wantsNext`: false when the central closed in the same write (it takes no more).
    ///
    /// `sentAhead` (pipeline): the message already sent after this one, with `endWritten`
    /// telling whether its END is out. It becomes the current message whatever the fairness
    /// rule says now (that was applied when it was started), and even when the central left:
    /// its ACK may still come within the grace a hang-up gives, as this one's did.
    fileprivate func secureAcknowledgedInSession(_ id: Int, wantsNext: Bool, sentAhead: OutgoingMessage? = nil,
                                                 sentAheadEndWritten: Bool = false) async -> OutgoingMessage? {
        guard var subscription = current, subscription.id == id else { return nil }
        // A sealed ACK can only come from the receiver that stored the message, so it counts
        // even when the central's hang-up (a socket event) overtook it (a D-Bus call); then
        // nothing more is sent.
        let centralLeft = subscription.delivery.hasHungUp
        // Counted before anything is awaited: a hang-up meanwhile must not report it lost.
        perform(subscription.delivery.handle(.countedInSession), on: &subscription)
        subscription.share.delivered(payloadBytes: subscription.message.byteCount)
        let summary = self.summary(of: &subscription)
        let continuation = SessionContinuation(centralLeft: centralLeft, wantsNext: wantsNext, hasSentAhead: sentAhead != nil,
                                               shareAllowsAnother: subscription.share.mayStartAnother())
        if offered?.sequence == subscription.sequence { offered = nil }
        current = subscription.delivery.isOver ? nil : subscription
        let next = await continueSession(subscription.message, summary, subscription.peer, continuation.asksForNext)
        if let next { offered = next }
        let stillCurrent = !isShutDown && current?.id == id
        let decision = continuation.decide(
            hasNext: next != nil, nextIsForThisPeer: next?.message.isAddressed(to: subscription.authenticatedPeer) ?? false,
            subscriptionStillCurrent: stillCurrent, hungUpByNow: current?.delivery.hasHungUp ?? true)
        guard case .goOn(let hangUpAfterwards) = decision, let next, var ongoing = current else {
            if case .close(let recordedAfterHangUp, let othersGetATurn) = decision {
                if recordedAfterHangUp { feed(.recordedAfterHangUp, to: id) }
                if othersGetATurn {
                    logger.info("closing the session with \(subscription.peer.address) after \(subscription.deliveredInSession) messages: others get a turn")
                }
            }
            return nil
        }
        // A fresh delivery (and bound) for the next message; the last one's timers stop.
        ongoing.armedTimers = [:]
        ongoing.delivery = SubscriptionDelivery(format: ongoing.format,
                                                confirmsIndications: ongoing.confirmations != nil,
                                                totalBytes: next.message.byteCount, limits: ongoing.delivery.limits)
        ongoing.message = next.message
        ongoing.sequence = next.sequence
        ongoing.startedAt = .now
        ongoing.progress = ProgressReports(totalBytes: next.message.byteCount, interval: configuration.progressInterval)
        ongoing.resumedFrom = nil
        let valueLength = ongoing.link.overChannel
            ? min(ongoing.link.channel.maximumValueLength, SequencedStream.channelValueLengths.upperBound)
            : ongoing.link.channel.maximumValueLength
        let values = SecureSenderSession.estimatedValueCount(payloadLength: next.message.byteCount,
                                                             maximumValueLength: valueLength,
                                                             overChannel: ongoing.link.overChannel)
        let hangUp = ongoing.delivery.hangUpReason
        armTransferDeadline(&ongoing, valueCount: values, valueLength: valueLength,
                            indications: ongoing.confirmations != nil)
        current = ongoing
        if continuation.takesSentAhead, sentAheadEndWritten {
            // Its END is out: its ACK is awaited under the ACK timeout from now.
            feed(.endOfMessageWritten, to: id)
        }
        // The central left with the message sent ahead outstanding: it counts only if its ACK
        // comes within the grace (its END out), otherwise it is lost as any other.
        if hangUpAfterwards, current?.id == id, current?.delivery.hasHungUp == false {
            feed(.hungUp(reason: hangUp ?? "the central left", drainedWhenClosed: nil), to: id)
        }
        return next.message
    }

    /// Pipeline: the current message's END is out and its ACK awaited; the message that
    /// follows it, to be sent at once (nil: none ready, the fairness rule says stop, or the
    /// central left). It is counted only after the current one, on its own ACK.
    /// Another central was refused while one is served: it waits, so the session under way
    /// starts no new message (the fairness rule, `SessionShare`).
    private func centralTurnedAway() {
        guard current?.share.centralWaiting == false else { return }
        current?.share.centralTurnedAway()
        logger.debug("another central waits: the session under way ends after its current message")
    }

    fileprivate func secureUpcoming(_ id: Int, sentAhead: [OutgoingMessage]) async -> OutgoingMessage? {
        guard let subscription = current, subscription.id == id, !subscription.delivery.hasHungUp, !isShutDown else {
            return nil
        }
        // The fairness rule as on an ACK: the current message and those sent ahead will be the
        // session's next counts.
        let pendingBytes = sentAhead.reduce(subscription.message.byteCount) { $0 + $1.byteCount }
        guard subscription.share.mayStartAnother(pendingMessages: 1 + sentAhead.count, pendingBytes: pendingBytes)
        else { return nil }
        var upcoming = await upcomingInSession(sentAhead.count)
        if let message = upcoming, !message.isAddressed(to: subscription.authenticatedPeer) { upcoming = nil }
        if upcoming != nil {
            logger.debug("\(subscription.peer.address): sending the next message ahead of message \(subscription.sequence)'s ACK")
        }
        return upcoming
    }

    /// Pipeline: the window is full (the current message and those sent ahead await their
    /// ACKs): the one after is read and hashed now, so that on the ACK it goes out without that
    /// wait (the fairness rule is applied when it is started).
    fileprivate func securePrepareAhead(_ id: Int, sentAhead: Int) async {
        guard let subscription = current, subscription.id == id, !subscription.delivery.hasHungUp, !isShutDown
        else { return }
        _ = await upcomingInSession(sentAhead)
    }

    /// Multi: the current message's END reached bluetoothd and its ACK is awaited: the
    /// delivery's ACK timeout starts (the transfer task keeps running for the next message).
    fileprivate func secureEndWritten(_ id: Int) {
        guard let subscription = current, subscription.id == id, !subscription.delivery.hasHungUp else { return }
        feed(.endOfMessageWritten, to: id)
        logger.debug("END of message \(subscription.sequence) written to \(subscription.peer.address); waiting for its ACK")
    }

    fileprivate func secureSessionFailed(_ id: Int, _ error: SecureSessionError) {
        guard let subscription = current, subscription.id == id else { return }
        let reason: String
        switch error {
        case .unauthorizedPeer(let key):
            if let addressee = subscription.message.addressee,
               let listed = configuration.secureMode.authorizedPeers.peer(for: key), listed.isListed {
                // Authorized, but not the one this message is for: told nothing about it.
                reason = "the message under way is for \(addressee), not for \(listed.name ?? key.fingerprint); "
                    + "nothing was sent after the handshake's first message"
                activityContinuation.yield(.addressedElsewhere(AuthenticatedPeer(listed)))
            } else {
                reason = "its key \(key.fingerprint) is not in the authorized peers; nothing was sent after the handshake's first message"
            }
        case .handshakeFailed(let detail) where detail.hasPrefix(Self.handshakeTimeoutPrefix):
            reason = detail + "; nothing was sent after the handshake's first message"
        default:
            reason = "secure session failed: \(error); nothing counted"
        }
        emitEvent(.centralDropped(subscription.peer, reason: reason))
        feed(.refusedByUs, to: id)
        if let device = subscription.device { disconnectLater(device) }
    }

    /// Writes a central may have queued for its session before the transfer task reads them;
    /// a central writing more is not following the protocol and its session fails on the gap.
    static let secureWriteBacklog = 256

    /// One line naming the central, no value sent, its link dropped.
    fileprivate func refuse(device: DeviceReference?, reason: String) {
        emitEvent(.centralDropped(describePeer(device), reason: reason))
        if let device { disconnectLater(device) }
    }

    /// What a central that offered the retired framed version 1 is told (one line, nothing sent).
    static let version1Refusal = "it offered framed version 1, which this bletransfer no longer speaks; "
        + "update bletransfer on that host; nothing was sent"

    static let handshakeTimeoutPrefix = "no answer to the handshake within"

    /// The central's next write while the session waits for its handshake message: nobody is
    /// authenticated yet, so the wait is bounded by `limit` (seconds), not by the message's
    /// transfer deadline. Nil: the writes ended (the central left).
    fileprivate static func handshakeWrite(from written: WriteInbox, within limit: Duration) async throws -> [UInt8]? {
        enum Outcome: Sendable { case value([UInt8]?), timedOut }
        let outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask { .value(await written.next(interruptible: true)) }
            group.addTask {
                try? await Task.sleep(for: limit)
                return .timedOut
            }
            let first = await group.next() ?? .timedOut
            group.cancelAll()
            return first
        }
        switch outcome {
        case .value(let value): return value
        case .timedOut:
            throw SecureSessionError.handshakeFailed("\(handshakeTimeoutPrefix) \(limit.components.seconds) s")
        }
    }

}

/// One subscription's secure transfer (started by `SubscriptionServer.startVersion2`): the
/// session — handshake message 1, the central's message 2 from its writes, then message 3, the
/// records and `EOM`, then the sealed ACK from its writes — and what the transfer remembers of
/// the messages under way.
private struct SecureTransfer {
    var session: SecureSenderSession
    let id: Int
    let server: SubscriptionServer
    /// Multi: the message whose END bluetoothd took; its ACK is awaited.
    var endWritten: UInt32?
    /// Pipeline: the messages sent after the one awaiting its ACK, oldest first (what the
    /// source's `upcomingNow` gave), and the message numbers they went out under.
    var pipelined: [(message: OutgoingMessage, number: UInt32)] = []
    /// Pipeline: the message numbers for which the source was asked for what follows, and for
    /// the message after that (`securePrepareAhead`).
    var askedUpcoming: UInt32?
    var preparedAhead: UInt32?
    /// One-message session: the central's ACK that arrived (read between notifications) before
    /// the bare EOM went out. It counts once EOM reached bluetoothd, in version 1's order.
    var acknowledgedBeforeEndOfMessage: SecureSenderSession.Event?

    /// Streams the session to its end; returns early once a write of the central ends it.
    mutating func run(over channel: any NotificationChannel, written: WriteInbox, confirmations: AsyncStream<Void>?,
                      handshakeTimeout: Duration) async throws {
        var confirmed = confirmations?.makeAsyncIterator()
        while !session.endOfMessageSent {
            while let value = session.nextValue() {
                try await channel.send(value)
                if confirmed != nil {
                    guard await confirmed?.next() != nil else { throw NotificationSocketError.closed }
                }
                // A message sent ahead is reported once it is the current one (on the
                // earlier message's ACK): until then the progress is the earlier one's.
                if pipelined.isEmpty {
                    await server.progressed(id, bytesSent: session.payloadBytesSent, finished: session.endOfMessageSent,
                                            sessionBytesOnAir: session.payloadBytesNotified)
                }
                // After EOM the ACK is read below, once the stream is drained, as before.
                for write in session.endOfMessageSent ? [] : written.takeAvailable() {
                    guard try await handleWrite(write) else { return }
                }
            }
            if session.endOfMessageSent { break }
            if let failure = session.localFailure { throw failure }
            if try await streamPaused() { continue }
            if !pipelined.isEmpty, preparedAhead != session.currentMessageNumber {
                preparedAhead = session.currentMessageNumber
                await server.securePrepareAhead(id, sentAhead: pipelined.count)
            }
            // The session waits for the central's handshake message, a PROGRESS (`window`) or,
            // in a multi session, the ACK of the message just sent (all bounded by the
            // deadline). A hang-up ends the wait unless an ACK is due: that may still come.
            let next = session.state == .awaitingHandshake
                ? try await SubscriptionServer.handshakeWrite(from: written, within: handshakeTimeout)
                : await written.next(interruptible: session.unacknowledgedCount == 0)
            guard let value = next else { throw NotificationSocketError.closed }
            guard try await handleWrite(value) else { return }
        }
        try await finish(over: channel, written: written)
    }

    /// The stream has nothing to send now. With a message's END handed over, its ACK is awaited
    /// (the ACK timeout bounds the wait); with `pipeline` the next message goes at once.
    /// Returns true when a message was started, so the stream goes on.
    private mutating func streamPaused() async throws -> Bool {
        if session.state == .awaitingAck, endWritten != session.currentMessageNumber {
            // The socket's small buffer keeps "handed over" close to what bluetoothd took, so
            // the wait is bounded as after EOM in a one-message session. (With a message sent
            // ahead still uncounted, the current one is the earlier one, whose bound is
            // running: this END's wait starts on that ACK.)
            endWritten = session.currentMessageNumber
            if pipelined.isEmpty { await server.secureEndWritten(id) }
        }
        guard session.acceptsNextBeforeAck, askedUpcoming != session.currentMessageNumber else { return false }
        askedUpcoming = session.currentMessageNumber
        guard let upcoming = await server.secureUpcoming(id, sentAhead: pipelined.map(\.message)) else { return false }
        try session.sendNext(payload: upcoming.body, digest: upcoming.digest,
                             metadata: SubscriptionServer.fileMetadata(upcoming.file))
        pipelined.append((upcoming, session.currentMessageNumber))
        return true
    }

    /// After `EOM`: drained, then (one message) the ACK from the central's writes.
    private mutating func finish(over channel: any NotificationChannel, written: WriteInbox) async throws {
        do {
            try await channel.drain()
            await server.endOfMessageWritten(id)
        } catch {
            // The central may have hung up right after its ACK: the ACK still counts
            // within the grace the delivery gives it, so keep reading its writes.
            await server.transferFailed(id, error)
        }
        // Multi: every message counted on its ACK; after CLOSE the central only unsubscribes.
        if session.carriesSeveralMessages { return }
        if let acknowledgement = acknowledgedBeforeEndOfMessage {
            await server.secureSessionEvent(acknowledgement, subscription: id)
            return
        }
        while let value = await written.next() {
            guard try await handleWrite(value) else { return }
        }
    }

    /// What the central's write means for the transfer task: false once the session is over.
    mutating func handleWrite(_ value: [UInt8]) async throws -> Bool {
        for event in try session.receiveWrite(value) {
            switch event {
            case .acknowledged:
                guard try await acknowledged(event) else { return false }
            case .centralAuthenticated, .resumed:
                await server.secureSessionEvent(event, subscription: id)
            case .closedByCentral, .refusedByCentral:
                await server.secureSessionEvent(event, subscription: id)
                return false
            }
        }
        return true
    }

    /// The central's ACK: counted, and in a multi session the next message started (or the
    /// one sent ahead made current). False once the session is over.
    private mutating func acknowledged(_ acknowledgement: SecureSenderSession.Event) async throws -> Bool {
        if !session.carriesSeveralMessages {
            guard session.endOfMessageSent else {
                // A central may acknowledge on END; EOM still goes out first.
                acknowledgedBeforeEndOfMessage = acknowledgement
                return true
            }
            await server.secureSessionEvent(acknowledgement, subscription: id)
            return false
        }
        // An ACK and the central's CLOSE may come in one write: count, send no more.
        let centralClosed = session.state == .closedByCentral
        if let upcoming = pipelined.first {
            // The earliest message's ACK: counted; the first one sent after it becomes the
            // subscription's current message.
            pipelined.removeFirst()
            let next = await server.secureAcknowledgedInSession(
                id, wantsNext: !centralClosed, sentAhead: upcoming.message,
                sentAheadEndWritten: endWritten.map { $0 >= upcoming.number } ?? false)
            if centralClosed { return true }
            guard let next, next.digest == upcoming.message.digest else {
                throw SecureSessionError.protocolViolation(
                    "the sender's next message changed while it was sent ahead; the session ends")
            }
            return true
        }
        let next = await server.secureAcknowledgedInSession(id, wantsNext: !centralClosed)
        if centralClosed {
            return true
        } else if let next {
            try session.sendNext(payload: next.body, digest: next.digest, metadata: SubscriptionServer.fileMetadata(next.file))
        } else {
            try session.finish()
        }
        return true
    }
}
