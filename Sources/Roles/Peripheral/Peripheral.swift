import BlueZ
import DaemonSupport
import Logging
import Machines
import ServiceLifecycle
import Storage
import Transfer
import Trust

/// The sending role (Apple's peripheral): advertises the transfer service and notifies each subscribed central the
/// current message, from byte 0, then `EOM`.
///
/// The manager state drives everything: in `poweredOn` the GATT application (an ObjectManager root, one primary
/// service, one characteristic with `notify`, `write-without-response` and `write`) and the advertisement are
/// registered; leaving `poweredOn` (adapter powered off, bluetoothd restarted) aborts the transfer under way (nothing
/// counted), unregisters both, and waits; coming back registers again. One central is served at a time (BlueZ 5.66
/// keeps one notify session per characteristic); advertising pauses meanwhile.
///
/// `run` returns once the message source has nothing more to send, or once a stop is asked for (``GracefulStop``: the
/// graceful shutdown of the service group it runs in, on SIGINT, SIGTERM or a deadline) and everything is
/// unregistered. Cancelling `run` also unregisters everything before `run` throws `CancellationError`.
package final class Peripheral: Sendable {
    package let configuration: PeripheralConfiguration
    package let session: BluetoothSession
    /// Everything the run does, in order. Finishes when `run` returns.
    package let events: AsyncStream<RoleEvent>
    private let continuation: AsyncStream<RoleEvent>.Continuation
    private let logger: Logger

    package init(configuration: PeripheralConfiguration, session: BluetoothSession,
                logger: Logger = Logger(label: "bletransfer.peripheral")) {
        self.configuration = configuration
        self.session = session
        self.logger = logger
        (events, continuation) = AsyncStream<RoleEvent>.makeStream(bufferingPolicy: .unbounded)
    }

    /// Serves `source` until it is exhausted; returns the number of messages delivered. Throws a `RoleFailure` for
    /// what waiting cannot fix (unknown adapter, no LE or advertising, bluetoothd absent at start, access denied,
    /// registration refused), `CancellationError` when cancelled — after unregistering everything.
    @discardableResult
    package func run(source: some MessageSource) async throws -> Int {
        defer { continuation.finish() }
        let continuation = self.continuation
        return try await run(source: source) { continuation.yield($0) }
    }

    private func run(source: some MessageSource, onEvent: @escaping @Sendable (RoleEvent) -> Void) async throws -> Int {
        let driver = ManagerStateDriver(session: session, adapterName: configuration.adapterName,
                                        requirement: .peripheral)
        if let failure = driver.unknownAdapterFailure() { throw failure }
        let counter = DeliveryCounter()
        let supervisor = ManagerStateSupervisor<ServingOutcome>(driver: driver)
        return try await supervisor.run(
            transitionSeen: { transition, history in
                if transition.changed || !history.hasStartedPeriod { onEvent(transition.roleEvent) }
                // Until serving first starts, a state that waiting will not change ends the run;
                // a start is not one (it serves, or waits for the adapter to show).
                let starts = transition.action == .start || transition.action == .resume
                guard !history.hasStartedPeriod, !starts else { return }
                if let failure = driver.unknownAdapterFailure() { throw failure }
                if let failure = transition.startupFailure { throw failure }
                if transition.to == .poweredOff && transition.changed {
                    onEvent(.warning("waiting for the adapter to be powered on (e.g. bluetoothctl power on)"))
                }
            },
            adapterMissing: { logger.debug("poweredOn without an adapter to use; waiting") },
            periodWork: { adapter in
                await self.serve(source: source, adapter: adapter, counter: counter, onEvent: onEvent)
            },
            periodEnded: { outcome in
                switch outcome {
                case .exhausted: return await counter.delivered
                case .failed(let failure): throw failure
                case .interrupted: return nil  // the state stream says why; serving starts again on poweredOn
                }
            },
            stopped: { await counter.delivered })
    }

    /// Apple's sample has `notify` and `write-without-response`. `write` is added so that a bletransfer central can
    /// send HELLO and ACK as write requests: the reply tells it that we hold the HELLO before it subscribes (the
    /// subscription may travel on another ATT bearer with EATT) and the ACK before it disconnects. Centrals that
    /// never write, like Apple's, do not care.
    static let characteristicFlags: [GATTCharacteristicFlag] = [.notify, .writeWithoutResponse, .write]

    /// Apple's characteristic when it carries confirmed indications (`CompatDelivery`): an
    /// Apple-flow central subscribes to it as usual (BlueZ, bleak and CoreBluetooth enable
    /// indications when a characteristic has no `notify`).
    static let indicatingCharacteristicFlags: [GATTCharacteristicFlag] = [.indicate, .writeWithoutResponse, .write]

    // MARK: One poweredOn period

    private enum ServingOutcome: Sendable {
        case exhausted
        /// Something waiting will not fix.
        case failed(RoleFailure)
        /// Cancelled, or bluetoothd / the adapter went away under us: the state stream says what comes next.
        case interrupted
    }

    /// Registers the application on `adapter`, advertises while there is a message and no central is being served, and
    /// counts deliveries, until the source is exhausted or the task is cancelled. Leaves nothing registered behind: the
    /// application's and the advertisement's scopes unregister on the way out, after the server shut down.
    private func serve(source: some MessageSource, adapter: Adapter, counter: DeliveryCounter,
                       onEvent: @escaping @Sendable (RoleEvent) -> Void) async -> ServingOutcome {
        let session = self.session
        let configuration = self.configuration
        let logger = self.logger
        let server = makeServer(source: source, adapter: adapter, counter: counter, onEvent: onEvent)
        let (characteristics, indicating, listener) = transferCharacteristics(adapter: adapter)
        let application = LocalGATTApplication(session: session, service: LocalGATTService(
            uuid: configuration.serviceUUID.canonical, characteristics: characteristics))
        await server.attachFallbackEmitter { [application] value, characteristic in
            try application.notify(value, characteristic: characteristic)
        }
        let advertisement = LEAdvertisement(session: session, configuration: AdvertisementConfiguration(
            serviceUUIDs: [configuration.serviceUUID.canonical], localName: configuration.localName))
        do {
            return try await application.withRegistration(on: adapter) {
                logger.debug("GATT application registered at \(application) on \(adapter.name)")
                return try await advertisement.withControl(on: adapter) { advertising in
                    // Each connection is a child of this group; the server's shut-down ends the
                    // one under way and the group, which then awaits them.
                    await withTaskGroup(of: Void.self, returning: ServingOutcome.self) { connections in
                        connections.addTask { await server.runConnections() }
                        let outcome = await withTaskGroup(of: Void.self, returning: ServingOutcome.self) { group in
                            // Beside the serving, for as long as it lasts: what BlueZ asks of the
                            // characteristics, in the order it arrives,
                            group.addTask {
                                await Self.serveRequests(application.events, indicating: indicating, on: adapter,
                                                         session: session, server: server)
                            }
                            // and centrals that leave without unsubscribing.
                            group.addTask { await Self.watchDisconnections(on: adapter, session: session, server: server) }
                            if let listener {
                                let timeout = configuration.channelHelloTimeout
                                group.addTask {
                                    await Self.acceptChannels(from: listener, on: adapter, session: session, server: server,
                                                              helloTimeout: timeout, logger: logger, onEvent: onEvent)
                                }
                            }
                            defer {
                                group.cancelAll()
                                listener?.close()
                            }
                            do {
                                return try await serveMessages(source: source, adapter: adapter, advertising: advertising,
                                                               server: server, counter: counter, onEvent: onEvent)
                            } catch { return classify(error, adapter: adapter) }
                        }
                        // First of the teardown; leaving the scopes then unregisters the advertisement, then the application.
                        await Self.shutDown(server, after: outcome)
                        return outcome
                    }
                }
            }
        } catch {
            // The application's registration failed (or the task was cancelled before it).
            listener?.close()
            let outcome = classify(error, adapter: adapter)
            await Self.shutDown(server, after: outcome)
            return outcome
        }
    }

    /// Shuts the server down (it ends the subscription under way, which makes calls of its
    /// own): in this task after a stop, outside its cancellation when it was cancelled.
    private static func shutDown(_ server: SubscriptionServer, after outcome: ServingOutcome) async {
        let reason = if case .exhausted = outcome {
            "the run ended"
        } else {
            GracefulStop.isRequested ? "the sender was stopped" : "Bluetooth is not available any more"
        }
        guard Task.isCancelled else { return await server.shutDown(reason: reason) }
        await runOutsideCancellation { await server.shutDown(reason: reason) }
    }

    /// The subscription server of one powered-on period: its connections count what they
    /// deliver in `source` and `counter`, and ask `source` for a multi session's next message.
    private func makeServer(source: some MessageSource, adapter: Adapter, counter: DeliveryCounter,
                            onEvent: @escaping @Sendable (RoleEvent) -> Void) -> SubscriptionServer {
        let session = self.session
        return SubscriptionServer(
            configuration: configuration, logger: logger,
            deliveries: SenderDeliveries(source: source, counter: counter, emit: onEvent),
            describePeer: { PeerResolver.describe($0, in: session) },
            bluetoothStillUp: {
                guard session.serviceState.isRunning, let properties = adapter.properties else { return false }
                return properties.powered && (properties.powerState ?? "on") == "on"
            },
            disconnectDevice: { device in
                // Drops a central that missed a bound; a failure (already gone) changes nothing.
                try? await Device(session: session, reference: device).disconnect()
            },
            emitEvent: onEvent)
    }

    /// Hands what BlueZ asks of the transfer characteristics to `server`, one event at a time in the order
    /// bluetoothd's calls arrived, until cancelled. `indicating` maps the index of each transfer characteristic to
    /// whether it carries confirmed indications; events of the others (the PSM characteristic answers reads itself)
    /// are not the server's. A write is answered only once the server holds the value: a bletransfer central takes
    /// the reply to its HELLO or ACK write request to mean that.
    private static func serveRequests(_ events: AsyncStream<LocalGATTEvent>, indicating: [Int: Bool], on adapter: Adapter,
                                      session: BluetoothSession, server: SubscriptionServer) async {
        for await event in events {
            switch event {
            case .write(let index, let value, let options, let reply):
                guard indicating[index] != nil else {
                    reply.fail(.notSupported, "write not supported")
                    continue
                }
                await server.write(value, device: options.device, mtu: options.mtu,
                                   connectedDevices: { session.connectedDevices(on: adapter) })
                reply.succeed()
            case .read(_, _, let reply): reply.fail(.notSupported, "read not supported")
            case .notifyStarted(let index):
                guard let indications = indicating[index] else { continue }
                let device = PeerResolver.onlyConnectedDevice(on: adapter, in: session)
                await server.acceptFallback(device: device, characteristic: index, indications: indications)
            case .notifyStopped(let index):
                guard indicating[index] != nil else { continue }
                await server.fallbackStopped()
            case .notifyAcquired(let index, let subscription):
                guard let indications = indicating[index] else {
                    subscription.socket.close()
                    continue
                }
                // bluetoothd names the subscriber; a stack that does not (BlueZoo forwards a
                // client's own AcquireNotify options) leaves the only connected device.
                let device = subscription.options.device
                    ?? PeerResolver.onlyConnectedDevice(on: adapter, in: session)
                await server.acceptSocket(subscription.socket, device: device, indications: indications)
            case .confirmed(let index): if indicating[index] == true { await server.indicationConfirmed() }
            case .notifyReleased:
                break  // the server sees the socket hang up itself
            }
        }
    }

    /// The transfer service's characteristics; which of them carry transfers (index → whether with confirmed
    /// indications); and the L2CAP listener whose PSM one of them publishes (nil without a channel).
    private func transferCharacteristics(adapter: Adapter)
        -> ([LocalGATTCharacteristic], [Int: Bool], (any ChannelListener)?) {
        let configuration = self.configuration
        // Apple's characteristic first (index 0); with indications on it, bletransfer's own
        // notifying characteristic beside it, which bletransfer centrals prefer.
        let channels = GATTChannelSetting.current()
        let indicatesCompat = configuration.compatDelivery.usesIndications(on: channels)
        logger.debug("Apple-flow centrals get \(indicatesCompat ? "confirmed indications" : "notifications") (--compat-delivery \(configuration.compatDelivery.rawValue), [GATT] Channels = \(channels.channels))")
        let acquireNotify = configuration.offersAcquireNotify
        var characteristics = [LocalGATTCharacteristic(
            uuid: configuration.characteristicUUID.canonical,
            flags: indicatesCompat ? Self.indicatingCharacteristicFlags : Self.characteristicFlags,
            offersAcquireNotify: acquireNotify)]
        var indicating = [0: indicatesCompat]
        if indicatesCompat {
            characteristics.append(LocalGATTCharacteristic(
                uuid: TransferUUIDs.framedCharacteristic.canonical, flags: Self.characteristicFlags,
                offersAcquireNotify: acquireNotify))
            indicating[1] = false
        }
        // Framed version 2 over an L2CAP channel: listen on a dynamic PSM and publish it in the service. Without one
        // (--no-l2cap, a kernel without Bluetooth sockets) centrals get GATT notifications, as before.
        let listener = openChannelListener(on: adapter)
        if let listener {
            characteristics.append(LocalGATTCharacteristic(
                uuid: TransferUUIDs.channelPSMCharacteristic.canonical, flags: [.read],
                value: [UInt8(truncatingIfNeeded: listener.psm), UInt8(listener.psm >> 8)]))
        }
        return (characteristics, indicating, listener)
    }

    private func serveMessages(source: some MessageSource, adapter: Adapter, advertising: AdvertisingControl,
                               server: SubscriptionServer, counter: DeliveryCounter,
                               onEvent: @escaping @Sendable (RoleEvent) -> Void) async throws -> ServingOutcome {
        guard let first = await GracefulStop.unlessRequested({ await source.current() }) ?? nil else {
            return Task.isCancelled || GracefulStop.isRequested ? .interrupted : .exhausted
        }
        try Task.checkCancellation()
        await server.offer(first, sequence: await counter.nextSequence)
        var advertisingWanted = false

        func advertise(_ wanted: Bool) async throws {
            guard wanted != advertisingWanted else { return }
            if wanted {
                try await advertising.start()
                onEvent(.advertising(adapter: adapter.name, localName: configuration.localName))
            } else {
                await advertising.pause()
                logger.debug("advertising paused while a central is served")
            }
            advertisingWanted = wanted
        }

        try await advertise(true)
        // A stop ends the loop at once; the teardown in `serve` says CLOSE to a central being served and unregisters.
        for await activity in server.activity.cancelOnGracefulShutdown() {
            try Task.checkCancellation()
            switch activity {
            case .subscribed: if configuration.pausesAdvertisingWhileServing { try await advertise(false) }
            case .delivered:
                // Counted by the connection; the next subscriber gets the next message.
                guard let next = await GracefulStop.unlessRequested({ await source.current() }) ?? nil else {
                    return Task.isCancelled || GracefulStop.isRequested ? .interrupted : .exhausted
                }
                await server.offer(next, sequence: await counter.nextSequence)
            case .subscriptionEnded:
                if !(await server.hasOffer) {
                    // A multi session counted its messages itself: offer the next one now.
                    guard let next = await GracefulStop.unlessRequested({ await source.current() }) ?? nil else {
                        return Task.isCancelled || GracefulStop.isRequested ? .interrupted : .exhausted
                    }
                    await server.offer(next, sequence: await counter.nextSequence)
                }
                try await advertise(true)
            case .addressedElsewhere(let peer):
                // Its next visit gets what is addressed to it (or to anyone), if anything is.
                if let mine = await source.message(for: peer) {
                    await server.offer(mine, sequence: await counter.nextSequence)
                }
            }
        }
        return .interrupted
    }

    /// The L2CAP listener of one poweredOn period; nil (none configured, or refused by the kernel: logged): GATT only.
    private func openChannelListener(on adapter: Adapter) -> (any ChannelListener)? {
        guard let transport = configuration.channelTransport else { return nil }
        let properties = adapter.properties
        do {
            let listener = try transport.listen(adapter: properties?.address,
                                                addressType: LEAddressType(bluez: properties?.addressType),
                                                receiveMTU: SequencedStream.channelValueLengths.upperBound)
            logger.debug("framed version 2 also over an L2CAP channel on PSM \(listener.psm)")
            return listener
        } catch {
            logger.debug("no L2CAP channel (\(error)); centrals get GATT notifications only")
            return nil
        }
    }

    /// Ends a subscription whose central disconnected without unsubscribing first (BlueZ
    /// normally hangs up the notify socket then too; the BlueZ mock does not).
    private static func watchDisconnections(on adapter: Adapter, session: BluetoothSession,
                                            server: SubscriptionServer) async {
        for await device in session.deviceDepartures(on: adapter) {
            let noneConnected = session.connectedDevices(on: adapter).isEmpty
            await server.deviceDisconnected(device, noneConnected: noneConnected)
        }
    }

    /// A failure while serving: Bluetooth going away is waited out (the state stream says so); else the run ends.
    private func classify(_ error: any Error, adapter: Adapter) -> ServingOutcome {
        if error is CancellationError { return .interrupted }
        if !session.serviceState.isRunning || adapter.properties?.powered != true {
            logger.debug("serving stopped as Bluetooth went away: \(error)")
            return .interrupted
        }
        return .failed(PeripheralFailure.classify(error))
    }
}

/// Counts the messages of one run across poweredOn periods, for `MessageSummary.sequence`.
actor DeliveryCounter {
    private(set) var delivered = 0

    /// The sequence number of the message being served (1 for the first).
    var nextSequence: Int { delivered + 1 }

    func recordDelivery() { delivered += 1 }
}
