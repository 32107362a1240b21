import BlueZ
import DaemonSupport
import Foundation
import Machines
import Storage
import Synchronization
import Transfer
import Trust

/// The receiving role: Apple's central flow over BlueZ. Waits for `poweredOn`, scans for the
/// transfer service, connects, subscribes, reassembles, verifies, acknowledges (framed),
/// unsubscribes, disconnects — CoreBluetooth sample's `cleanup()` order — and scans again for
/// the next message. Leaving `poweredOn` abandons the current transfer (nothing of it is kept)
/// and work resumes when the state comes back.
public final class Central: Sendable {
    public let configuration: CentralConfiguration
    public let session: BluetoothSession
    /// Everything the run does, in order. Finishes when `run` returns.
    public let events: AsyncStream<RoleEvent>
    private let continuation: AsyncStream<RoleEvent>.Continuation
    private let progressState: RunState

    public init(configuration: CentralConfiguration, session: BluetoothSession) {
        self.configuration = configuration
        self.session = session
        (events, continuation) = AsyncStream<RoleEvent>.makeStream(bufferingPolicy: .unbounded)
        progressState = RunState(book: PeerBook(backoff: configuration.backoff, minimumRSSI: configuration.minimumRSSI))
    }

    /// Receives `configuration.messageCount` messages (forever when nil) and hands each to
    /// `sink`. Returns the number received. Throws a ``ClassifiedFailure`` for what ends the
    /// run (unknown adapter, no bluetoothd at start, a corrupt message, a sink that cannot
    /// write, the deadline), `CancellationError` when cancelled. A stop (``GracefulStop``) ends the
    /// run between two inputs, after the link is released and discovery stopped: it returns
    /// the number received so far.
    ///
    /// - Parameter timeout: overall deadline; passing it ends the run with `.timedOut`.
    @discardableResult
    public func run(sink: any MessageSink, timeout: Duration? = nil) async throws -> Int {
        defer { continuation.finish() }
        guard let timeout else { return try await runUntilDone(sink: sink) }
        let state = progressState
        let wanted = configuration.messageCount
        do {
            return try await withTimeLimit(timeout, onTimeout: {
                let seconds = MessageAssembly.describe(timeout)
                if let wanted, wanted > 1 {
                    return RoleFailure(.timedOut, "timed out after \(seconds) (\(state.receivedSnapshot) of \(wanted) messages received)")
                }
                if wanted == nil, state.receivedSnapshot > 0 {
                    return RoleFailure(.timedOut, "timed out after \(seconds) with \(state.receivedSnapshot) message(s) received, "
                        + "before the sender ended its session; run again to take the rest")
                }
                return RoleFailure(.timedOut, "timed out after \(seconds) without receiving a message")
            }) {
                try await self.runUntilDone(sink: sink)
            }
        } catch let failure as RoleFailure where failure.kind == .timedOut {
            // Every wanted message was stored (and acknowledged) before the deadline; only the
            // clean-up after the last one was still running: the run did its job.
            if let wanted, state.receivedSnapshot >= wanted { return state.receivedSnapshot }
            throw failure
        }
    }

    // MARK: State-driven supervision

    private enum WorkOutcome: Sendable {
        case finished
        case failed(any ClassifiedFailure)
        /// Cancelled (the adapter left `poweredOn`) or stopped (``GracefulStop``).
        case interrupted
    }

    private func runUntilDone(sink: any MessageSink) async throws -> Int {
        let driver = ManagerStateDriver(session: session, adapterName: configuration.adapterName, requirement: .central)
        if let failure = driver.unknownAdapterFailure() { throw failure }
        let supervisor = ManagerStateSupervisor<WorkOutcome>(driver: driver)
        return try await supervisor.run(
            transitionSeen: { transition, history in
                emit(transition.roleEvent)
                guard history.isFirstTransition else { return }
                if let failure = transition.startupFailure { throw failure }
                let queue = configuration.notificationQueue
                if !queue.isSufficient { emit(.warning("notification queue: \(queue.summary)")) }
                if transition.to == .poweredOff {
                    emit(.warning("waiting for the adapter to be powered on (e.g. bluetoothctl power on)"))
                }
            },
            // Leaving poweredOn cancels the work: that abandons the transfer in progress
            // (nothing partial reaches the sink), releases the link and stops discovery.
            periodWork: { adapter in await self.work(on: adapter, sink: sink) },
            periodEnded: { outcome in
                switch outcome {
                case .finished: return progressState.receivedSnapshot
                case .failed(let failure): throw failure
                case .interrupted: return nil
                }
            },
            stopped: { progressState.receivedSnapshot })
    }

    // MARK: Work in poweredOn

    private func work(on adapter: Adapter, sink: any MessageSink) async -> WorkOutcome {
        var scanFailures = 0
        while !Task.isCancelled && !GracefulStop.isRequested {
            if let wanted = configuration.messageCount, progressState.receivedSnapshot >= wanted {
                return .finished
            }
            let found: (Device, PeerDescription)
            do {
                found = try await discoverPeer(on: adapter)
                scanFailures = 0
            } catch where error is CancellationError || error is StopRequested {
                await stopDiscovery(adapter)
                return .interrupted
            } catch let failure as any ClassifiedFailure {
                await stopDiscovery(adapter)
                return .failed(failure)
            } catch {
                await stopDiscovery(adapter)
                if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
                scanFailures += 1
                let delay = configuration.backoff.delay(afterFailures: scanFailures)
                emit(.retrying(reason: "scanning failed: \(Self.describe(error))", delay: delay))
                guard await GracefulStop.sleep(for: delay) else { return .interrupted }
                continue
            }
            let (device, peer) = found
            let receivedBeforeVisit = progressState.receivedSnapshot
            do {
                try await visit(device, peer: peer, adapter: adapter, sink: sink)
                let now = progressState.elapsed
                progressState.withBook { $0.recordSuccess(peer.address, at: now) }
                if configuration.messageCount == nil, configuration.endsWithSendersSession,
                   progressState.receivedSnapshot > receivedBeforeVisit {
                    return .finished
                }
            } catch {
                let storedSome = progressState.receivedSnapshot > receivedBeforeVisit
                if let outcome = afterFailedVisit(error, peer: peer, storedSome: storedSome) { return outcome }
            }
        }
        return .interrupted
    }

    /// Books a visit that ended in `error` (`storedSome`: it stored messages first) and says
    /// how the run goes on: nil to scan again, or the outcome that ends `work`.
    private func afterFailedVisit(_ error: any Error, peer: PeerDescription, storedSome: Bool) -> WorkOutcome? {
        if error is CancellationError || error is StopRequested { return .interrupted }
        switch error {
        case let failure as TransferFailure:
            if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
            // One send's session: a sender that has given its last message may close the
            // link rather than the session. Whatever ended a visit that stored messages,
            // the run has what that send offered; a sender that still holds files keeps
            // them for the next `receive` (nothing is acknowledged that was not stored).
            if configuration.messageCount == nil, configuration.endsWithSendersSession, storedSome {
                return .finished
            }
            let severe: Bool = switch failure {
            case .unsuitable, .refused: true
            default: false
            }
            let delay = backOff(peer, severe: severe, storedSome: storedSome)
            if case .refused(let bound, let reason) = failure {
                emit(.refused(peer, bound: bound, reason: reason, delay: delay))
                return nil
            }
            if case .corrupt(let error) = failure, configuration.stopOnCorruptMessage {
                return .failed(RoleFailure(.dataError, "message from \(EventText.describe(peer)) failed verification: \(error)"))
            }
            emit(.retrying(reason: "\(EventText.describe(peer)): \(failure)", delay: delay))
            return nil
        case let failure as any ClassifiedFailure:
            return .failed(failure)
        default:
            if Task.isCancelled || GracefulStop.isRequested { return .interrupted }
            let delay = backOff(peer, severe: false, storedSome: storedSome)
            emit(.retrying(reason: "\(EventText.describe(peer)): \(Self.describe(error))", delay: delay))
            return nil
        }
    }

    /// How long `peer` waits after a failed visit. A visit that stored messages before the link
    /// failed (a multi session cut midway) proved the sender: unless the failure is severe, it
    /// is visited again at once, not backed off.
    private func backOff(_ peer: PeerDescription, severe: Bool, storedSome: Bool) -> Duration {
        let now = progressState.elapsed
        return progressState.withBook { book in
            if storedSome && !severe {
                book.recordSuccess(peer.address, at: now)
                return .zero
            }
            return book.recordFailure(peer.address, at: now, severe: severe)
        }
    }

    // MARK: Discovery

    private enum ScanInput: Sendable {
        case sighting(DeviceSighting)
        case tick
        case ended
    }

    /// Scans until a peripheral offering the transfer service is worth a visit, then stops
    /// discovery (BlueZ connects unreliably while scanning) and returns it. Devices BlueZ
    /// already knows come first (they emit no InterfacesAdded); peers backing off are skipped
    /// until their pause ends.
    private func discoverPeer(on adapter: Adapter) async throws -> (Device, PeerDescription) {
        let service = configuration.serviceUUID.canonical
        // Subscribe (and take the cache snapshot) before discovery starts, so nothing is missed.
        let sightings = adapter.sightings(serviceUUID: service)
        let forwardSightings = InputProducer<ScanInput> { input in
            for await sighting in sightings { input.yield(.sighting(sighting)) }
            // The sightings end with the adapter; a cancelled scan has nothing to report.
            if !Task.isCancelled { input.yield(.ended) }
        }
        // The ticks wake the scan when a peer's back-off ends, for peers BlueZ keeps in its
        // cache without reporting them again, and when a stop is asked for.
        return try await withMergedInputs(forwardSightings, .ticks(every: .seconds(1), .tick), .stopRequest(.tick)) { inputs in
            try await scan(adapter, for: service, inputs: inputs)
        }
    }

    /// The scan of `discoverPeer`, fed by `inputs`.
    private func scan(_ adapter: Adapter, for service: String,
                      inputs: AsyncStream<ScanInput>) async throws -> (Device, PeerDescription) {
        do {
            try await adapter.setDiscoveryFilter(uuids: [service], transport: .le, duplicateData: true)
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            emit(.warning("SetDiscoveryFilter failed (\(error)); scanning without a filter"))
        }
        do {
            try await adapter.startDiscovery()
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            // InProgress: a discovery session of ours is already starting or running.
            guard case .bluez(.inProgress, _) = error else { throw error }
        }
        emit(.scanning(adapter: adapter.name))
        var scanStartedAt = ContinuousClock.now

        for await item in inputs {
            if GracefulStop.isRequested { throw StopRequested() }
            let candidates: [Device]
            switch item {
            case .sighting(let sighting):
                candidates = [sighting.device]
            case .tick:
                candidates = adapter.devices().filter { device in
                    device.properties.map { Self.offers(service, $0) } ?? false
                }
            case .ended:
                throw BluetoothError.objectGone("adapter \(adapter.name)")
            }
            let now = progressState.elapsed
            // Everything heard in this scan competes, not only the device just sighted:
            // PeerBook.choose shares the visits fairly between proven senders and new
            // addresses. BlueZ reports an RSSI only for devices heard during discovery, so
            // cached entries of senders that left do not compete.
            var offered = candidates
            if case .sighting = item {
                let known = adapter.devices().filter { device in
                    guard device.reference != candidates.first?.reference, let properties = device.properties else { return false }
                    return properties.rssi != nil && Self.offers(service, properties)
                }
                offered += known
            }
            let withProperties = offered.compactMap { device in device.properties.map { (device, $0) } }
            let choices = withProperties.map { PeerBook.Candidate(address: $0.1.address.description, rssi: $0.1.rssi.map(Int.init)) }
            guard let index = progressState.withBook({ $0.choose(choices, at: now) }) else {
                if case .tick = item, ContinuousClock.now - scanStartedAt >= configuration.scanRestartInterval {
                    // Nothing worth a visit yet: a fresh scan resets the controller's duplicate
                    // filter and reports again a device whose first report was lost.
                    scanStartedAt = ContinuousClock.now
                    await restartDiscovery(adapter)
                }
                continue
            }
            let (device, properties) = withProperties[index]
            let peer = PeerDescription(address: properties.address.description, name: properties.alias ?? properties.name,
                                       rssi: properties.rssi.map(Int.init))
            emit(.peerFound(peer))
            await stopDiscovery(adapter)
            return (device, peer)
        }
        throw CancellationError()
    }

    private static func offers(_ service: String, _ properties: DeviceProperties) -> Bool {
        properties.uuids.contains { BluetoothUUID.matches($0, service) }
    }

    private func restartDiscovery(_ adapter: Adapter) async {
        await stopDiscovery(adapter)
        // InProgress or a transient refusal: the ticker tries again at the next interval; the
        // adapter going away reaches the state machine by its own path.
        try? await adapter.startDiscovery()
    }

    private func stopDiscovery(_ adapter: Adapter) async {
        await boundedCleanup(limit: .seconds(5)) {
            try? await adapter.stopDiscovery()
        }
    }

    // MARK: Receipts

    /// Who sent a message, for the receipt journal: the key of an authenticated (listed)
    /// sender, which stays the same across addresses and restarts; otherwise its address.
    static func receiptSender(_ key: AuthenticatedPeer?, peer: PeerDescription) -> String {
        if let key, key.isListed { return key.fingerprint }
        return peer.address
    }

    /// The sender has this ACK: the journal keeps the message a while longer (a sender killed
    /// before it moved its file to `sent/` offers it again), then forgets it.
    private func forgetReceipt(sender: String?, digest: [UInt8]) async {
        guard let sender else { return }
        await configuration.receiptJournal?.recordAcknowledged(sender: sender, digest: lowercaseHex(digest))
    }

    // MARK: One visit

    /// Connect, resolve, subscribe, receive one message, store it, acknowledge, unsubscribe,
    /// disconnect. Throws ``TransferFailure`` for what a later visit may fix (or a corrupt
    /// message), a ``ClassifiedFailure`` for what ends the run.
    private func visit(_ device: Device, peer: PeerDescription, adapter: Adapter, sink: any MessageSink) async throws {
        var channel: CharacteristicSubscription?
        progressState.beginVisit()
        // Room for nothing at all (the reserve alone is broken, a quota full): do not even
        // connect. The message's own length is checked once the sender announces it.
        if let refusal = sink.admissionRefusal(byteCount: 0) {
            throw TransferFailure.refused(bound: refusal.bound.rawValue, reason: refusal.reason)
        }
        do {
            try await connect(device, peer: peer)
            emit(.connected(peer))
            let characteristic: RemoteGATTCharacteristic
            (characteristic, channel) = try await transferCharacteristicAndChannel(on: device, adapter: adapter, peer: peer)
            let policy = configuration.secureMode
            let (hello, secureSession) = try await offerFramed(on: characteristic, channel: channel, peer: peer, sink: sink)

            do {
                let state = progressState
                if channel == nil {
                    channel = try await CharacteristicSubscription.subscribe(to: characteristic) { [weak self] text in
                        // Peers without AcquireNotify (Apple's sample, bless) are normal: say it once.
                        if state.firstFallbackNotice() { self?.emit(.warning(text)) }
                    }
                }
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                throw TransferFailure.transient("subscribing failed: \(error)")
            }
            guard let channel else { throw TransferFailure.transient("subscribing failed") }

            let awaitingClose = try await receive(
                through: channel, from: device, peer: peer, hello: hello, secureSession: secureSession,
                requiresSecure: policy.requiresSecure, characteristic: characteristic, sink: sink)
            await confirmByClose(awaitingClose, on: channel, peer: peer)
        } catch let failure as TransferFailure {
            // A refusal (a bound of ours, the sender's key or format) says nothing against the
            // channel: the next visit may open it at once again.
            if !failure.isRefusal { progressState.forgetChannel(of: peer.address) }
            // A refusal gets its own event (one line) from the caller.
            if channel != nil, !failure.isRefusal {
                emit(.transferAborted(peer, reason: failure.description))
            }
            await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer)
            throw failure
        } catch {
            progressState.forgetChannel(of: peer.address)
            if channel != nil {
                let stopped = Task.isCancelled || error is StopRequested
                emit(.transferAborted(peer, reason: stopped ? "stopped" : Self.describe(error)))
            }
            await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer)
            throw error
        }
        // Forgotten after a success too: BlueZ then reports the peer again only when it really
        // advertises again (a fresh InterfacesAdded), instead of offering a cached entry of a
        // sender that may have finished and left.
        let lastWanted = configuration.messageCount.map { progressState.receivedSnapshot >= $0 } ?? false
        await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer,
                      handingBack: lastWanted)
    }

    /// Over a channel our last ACK has no reply: the sender closing the channel once it has
    /// read it is the confirmation. Without it, the messages may come again, so they are
    /// remembered as stored; with it, their receipts are done.
    private func confirmByClose(_ awaitingClose: [UnacknowledgedMessage], on channel: CharacteristicSubscription,
                                peer: PeerDescription) async {
        guard !awaitingClose.isEmpty else { return }
        if await !channel.waitForSenderClose(limit: configuration.channelCloseWait) {
            for message in awaitingClose {
                progressState.rememberUnacknowledged(from: peer.address, digest: message.digest, storedAt: message.storedAt)
            }
        } else {
            for message in awaitingClose { await forgetReceipt(sender: message.sender, digest: message.digest) }
        }
    }

    /// Asks for the framed protocol when the run wants it and the peer takes writes: writes a
    /// HELLO offering the encrypted session (over the channel when there is one) and makes the
    /// session that will answer. A peer that takes no HELLO is left to Apple's flow, unless
    /// the policy requires the secure mode: then it is refused.
    private func offerFramed(on characteristic: RemoteGATTCharacteristic, channel: CharacteristicSubscription?,
                             peer: PeerDescription, sink: any MessageSink) async throws
        -> (hello: Hello?, session: SecureReceiverSession?) {
        var hello: Hello?
        var secureSession: SecureReceiverSession?
        let policy = configuration.secureMode
        let overChannel = channel?.overChannel ?? false
        let helloWriteType: GATTWriteType? = overChannel ? .command : Self.writeType(for: characteristic.flags)
        if configuration.requestFramed, let writeType = helloWriteType {
            // The framed protocol's HELLO, always offering the encrypted session; a sender
            // that answers anything but a secure stream or Apple's flow is refused.
            let session = SessionID.random()
            // `resume` only with a spool to keep checkpoints in.
            let spool = configuration.resumeSpool
            var offered: Capabilities = [.secure, .meta, .multi, .pipeline, .window]
            if spool != nil { offered.insert(.resume) }
            if overChannel { offered.insert(.channel) }
            let helloV2 = HelloV2(session: session.rawValue, offered: offered)
            let candidate = Hello(version: HelloV2.version, session: session)
            do {
                if let channel, overChannel {
                    try await channel.write(helloV2.encoded, type: writeType)
                } else {
                    try await characteristic.writeValue(helloV2.encoded, type: writeType)
                }
                hello = candidate
                let maximumWriteLength = overChannel ? (channel?.mtu ?? 23) : max(20, (characteristic.mtu ?? 23) - 3)
                secureSession = SecureReceiverSession(
                    identity: policy.identity, authorizedPeers: policy.authorizedPeers, hello: helloV2,
                    maximumPayloadLength: configuration.limits.maximumPayload(onDisk: sink.partialPayloadStore != nil),
                    maximumWriteLength: maximumWriteLength, heldPrefix: Self.heldPrefix(in: spool),
                    partialStore: sink.partialPayloadStore)
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                emit(.warning("could not ask \(EventText.describe(peer)) for the framed format (\(error)); expecting compat"))
            }
        }
        if policy.requiresSecure && secureSession == nil {
            throw TransferFailure.refused(
                bound: "authorized-peers",
                reason: "it offers no way to start the secure mode (no writable transfer characteristic); nothing kept")
        }
        return (hello, secureSession)
    }

    /// One complete, verified message of a visit: store it, then tell the sender (an ACK means
    /// "stored"), then report it. In a secure session that carries several messages this runs
    /// once per message, and the stream goes on after the ACK.
    ///
    /// `unconfirmed`: with `pipeline`, the ACK of a message the sender answers anyway goes as a
    /// write command, without waiting for a reply (BlueZ takes one write request at a time); the
    /// sender's later messages confirm it (`confirmAcknowledgements`). What is still unconfirmed
    /// when the visit ends is remembered, so that a message sent again is not stored twice.
    private func takeMessage(_ message: ReceivedMessage, duration: Duration, assembly: inout MessageAssembly,
                             peer: PeerDescription, characteristic: RemoteGATTCharacteristic,
                             channel: CharacteristicSubscription,
                             sink: any MessageSink, unconfirmed: inout [UnconfirmedAcknowledgement],
                             awaitingClose: inout [UnacknowledgedMessage]) async throws {
        let taken = try await storeOnce(message, from: peer, authenticatedSender: assembly.authenticatedSender, sink: sink)
        // The ACK means "stored", sealed (only this authenticated central could have produced
        // it); Apple's flow has none.
        if assembly.isVersion2 {
            try await acknowledge(message, taken, assembly: &assembly, peer: peer, characteristic: characteristic,
                                  channel: channel, unconfirmed: &unconfirmed, awaitingClose: &awaitingClose)
        }
        report(message, taken, duration: duration, assembly: assembly, peer: peer)
    }

    /// What `storeOnce` did with a message.
    private struct TakenMessage {
        /// The sender as the receipt journal names it.
        var sender: String
        /// The copy stored before (this run, or an earlier one), when the message came again.
        var earlierCopy: UnacknowledgedMessage?
        /// The earlier copy was stored by an earlier run of this receiver.
        var storedByEarlierRun: Bool
        /// The run's number for a message stored now (0 for one stored before).
        var sequence: Int
        /// Where it was stored now.
        var storedAt: String?
        /// Where it is stored, now or before.
        var storedWhere: String? { storedAt ?? earlierCopy?.storedAt }
    }

    /// Stores a complete, verified message unless it is stored already. A sender that never saw
    /// our ACK sends the same message again: it is stored already, so it is acknowledged (and
    /// said), not stored twice. What is about to be stored is on disk first (the receipt
    /// journal), so that no crash makes it stored twice. A message the sink refuses is a
    /// refusal: no ACK, the sender keeps it, this peer is backed off and others are served.
    private func storeOnce(_ message: ReceivedMessage, from peer: PeerDescription, authenticatedSender: AuthenticatedPeer?,
                           sink: any MessageSink) async throws -> TakenMessage {
        let sender = Self.receiptSender(authenticatedSender, peer: peer)
        let visit = progressState.visit
        var earlierCopy = message.digest.flatMap {
            progressState.takeUnacknowledged(from: peer.address, digest: $0)
        }
        // Stored by an earlier run of this receiver (killed, restarted) that the sender never
        // saw acknowledged: counted now, as the message is there.
        var storedByEarlierRun = false
        if earlierCopy == nil, let journal = configuration.receiptJournal, let digest = message.digest,
           let found = await journal.findEarlierCopy(sender: sender, digest: lowercaseHex(digest), size: message.byteCount,
                                                     excludingVisit: visit) {
            earlierCopy = UnacknowledgedMessage(digest: digest, storedAt: found)
            storedByEarlierRun = true
        }
        var taken = TakenMessage(sender: sender, earlierCopy: earlierCopy, storedByEarlierRun: storedByEarlierRun,
                                 sequence: 0, storedAt: nil)
        guard earlierCopy == nil else { return taken }
        taken.sequence = progressState.nextSequence()
        let journal = configuration.receiptJournal
        let digest = message.digest.map { lowercaseHex($0) }
        if let digest {
            await journal?.recordWillStore(sender: sender, digest: digest, size: message.byteCount, name: message.file?.name, visit: visit)
        }
        do {
            taken.storedAt = try await sink.store(message, sequence: taken.sequence, from: peer)
        } catch let refusal as MessageRefused {
            if let digest { await journal?.recordForgotten(sender: sender, digest: digest) }
            throw TransferFailure.refused(bound: "storage", reason: "the message could not be stored (\(refusal.reason))")
        }
        if let digest { await journal?.recordStored(sender: sender, digest: digest, visit: visit, at: taken.storedAt) }
        return taken
    }

    /// Writes the ACK of a stored message and books what confirms it: the write's reply, the
    /// sender's answer (its next message), or the sender's closing of the channel; what
    /// nothing confirms is remembered, so that the message coming again is not stored twice.
    private func acknowledge(_ message: ReceivedMessage, _ taken: TakenMessage,
                             assembly: inout MessageAssembly,
                             peer: PeerDescription, characteristic: RemoteGATTCharacteristic,
                             channel: CharacteristicSubscription, unconfirmed: inout [UnconfirmedAcknowledgement],
                             awaitingClose: inout [UnacknowledgedMessage]) async throws {
        // Over a channel every write is an SDU: nothing answers it, like a write command.
        let offeredType: GATTWriteType = channel.overChannel ? .command : Self.writeType(for: characteristic.flags) ?? .command
        // The last message this run wants: in a multi session CLOSE 01 goes with its ACK.
        let lastWanted = taken.earlierCopy == nil
            && configuration.messageCount.map { progressState.receivedSnapshot + 1 >= $0 } ?? false
        let plan = AcknowledgementPlan(
            overChannel: channel.overChannel, offeredAsCommand: offeredType == .command,
            commandAllowed: characteristic.flags.contains(.writeWithoutResponse),
            sessionGoesOn: assembly.expectsMoreMessages, pipelines: assembly.pipelines, lastWanted: lastWanted)
        var written = false
        do {
            let values = try assembly.secureAcknowledgement(alreadyStored: taken.earlierCopy != nil, closing: plan.closing)
            for value in values { try await channel.write(value, type: plan.asCommand ? .command : .request) }
            written = true
            // A write command has no completion: bluetoothd replies once it queued it, and a
            // Disconnect issued at once can overtake it on a slow link. No signal tells when it
            // left, so give the link a moment.
            if plan.settles { try? await Task.sleep(for: configuration.acknowledgementSettle) }
        } catch {
            emit(.warning("could not acknowledge the message to \(EventText.describe(peer)): \(Self.describe(error))"))
        }
        guard let digest = message.digest else { return }
        switch plan.booking(written: written) {
        case .writeReply:
            await forgetReceipt(sender: taken.sender, digest: digest)
        case .channelClose:
            awaitingClose.append(UnacknowledgedMessage(digest: digest, storedAt: taken.storedWhere, sender: taken.sender))
        case .senderAnswer:
            if let number = assembly.currentMessageNumber {
                unconfirmed.append(UnconfirmedAcknowledgement(
                    message: number, digest: digest, storedAt: taken.storedWhere, sender: taken.sender))
            } else {
                progressState.rememberUnacknowledged(from: peer.address, digest: digest, storedAt: taken.storedWhere)
            }
        case .nothing:
            progressState.rememberUnacknowledged(from: peer.address, digest: digest, storedAt: taken.storedWhere)
        }
    }

    /// Counts and reports a taken message: `received` for one stored now, a warning for one
    /// that came again.
    private func report(_ message: ReceivedMessage, _ taken: TakenMessage, duration: Duration,
                        assembly: MessageAssembly, peer: PeerDescription) {
        if taken.storedByEarlierRun { progressState.markReceived() }
        if let earlierCopy = taken.earlierCopy {
            let place = earlierCopy.storedAt.map { " (stored as \($0))" } ?? ""
            emit(.warning("\(EventText.describe(peer)) sent again the message it had not seen acknowledged, "
                          + "sha256 \(message.digest.map { lowercaseHex($0) } ?? "?")\(place): acknowledged, not stored twice"))
            return
        }
        progressState.markReceived()
        // Framed values carry sequence numbers; compat ones do not, and on a link with
        // several ATT bearers BlueZ may have handed them over out of order.
        var ordering: CompatOrdering?
        if message.format != .framed && !assembly.isVersion2 {
            let exposure = configuration.linkExposure(peer.address)
            if exposure.mayReorder {
                ordering = .atRisk(because: "the link has \(exposure.summary)")
                emit(.warning("message \(taken.sequence) from \(EventText.describe(peer)) came in Apple's format over "
                    + "a link with \(exposure.summary): its bytes may be out of order and nothing in that "
                    + "format can tell. Set [GATT] Channels = 1 in /etc/bluetooth/main.conf on either host"))
            }
        }
        emit(.received(
            MessageSummary(sequence: taken.sequence, byteCount: message.byteCount,
                           format: assembly.isSecure ? .secure : message.format == .framed ? .framed : .compat,
                           sha256: message.digest.map { lowercaseHex($0) }, duration: duration, ordering: ordering,
                           peerKey: assembly.authenticatedSender, fileName: message.file?.name,
                           resumedFrom: assembly.resumedFrom),
            from: peer, storedAt: taken.storedAt))
        if let key = assembly.authenticatedSender, !key.isListed, progressState.firstUnauthenticatedNotice() {
            emit(.warning(EventText.unauthenticatedNotice(peer: "the sender", key: key)))
        }
    }

    /// The checkpoint lookup a secure session makes on each HEADER (nil: no spool).
    private static func heldPrefix(in spool: ResumeSpool?) -> SecureReceiverSession.HeldPrefix? {
        guard let spool else { return nil }
        return { key, header in
            ResumeSpool.checkpoints(header) ? spool.heldPrefixFile(sender: key, header: header) : MessagePayload([])
        }
    }

    /// `Device1.Connect`, retrying transient failures with back-off.
    private func connect(_ device: Device, peer: PeerDescription) async throws {
        let attempts = max(1, configuration.connectAttempts)
        for attempt in 1...attempts {
            emit(.connecting(peer, attempt: attempt))
            do {
                try await device.connectOnce(timeout: configuration.connectTimeout)
                return
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                // After a call that timed out, bluetoothd may still be trying (the next Connect
                // would get "Operation already in progress" for as long as it does; seen after
                // the peer's adapter was power-cycled mid-connect), and after "in progress" it
                // certainly is. Disconnect cancels a pending Connect (device-api.txt); on a
                // device that is neither connected nor connecting it does nothing.
                await boundedCleanup(limit: .seconds(5)) { try? await device.disconnect() }
                guard error.isTransientConnectFailure, attempt < attempts else {
                    throw TransferFailure.transient("connecting failed: \(error)")
                }
                let delay = configuration.backoff.delay(afterFailures: attempt)
                emit(.retrying(reason: "connecting to \(EventText.describe(peer)) failed: \(error)", delay: delay))
                try await Task.sleep(for: delay)
            }
        }
    }

    private func resolveCharacteristic(on device: Device) async throws -> RemoteGATTCharacteristic {
        do {
            try await device.waitUntilServicesResolved(timeout: configuration.servicesResolveTimeout)
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            switch error {
            case .timedOut:
                throw TransferFailure.transient(
                    "services did not resolve within \(MessageAssembly.describe(configuration.servicesResolveTimeout))")
            default:
                throw TransferFailure.transient("waiting for services failed: \(error)")
            }
        }
        // A bletransfer sender whose Apple characteristic carries indications serves its own
        // notifying characteristic beside it; framed transfers go there at full speed.
        if let framed = try? device.characteristic(service: configuration.serviceUUID.canonical,
                                                   characteristic: TransferUUIDs.framedCharacteristic.canonical) {
            return framed
        }
        do {
            return try device.characteristic(service: configuration.serviceUUID.canonical,
                                             characteristic: configuration.characteristicUUID.canonical)
        } catch let error as BluetoothError {
            throw TransferFailure.unsuitable("\(error)")
        }
    }

    /// Receives one message through `channel` (or, in a secure session that carries several,
    /// each in turn until the sender closes or the run has all it wants), watching for the
    /// peer leaving and for silence. Each message is stored and acknowledged as it completes.
    ///
    /// Returns the messages whose ACK only the sender's closing of the channel can confirm
    /// (over a channel, the visit's last ones); empty over GATT.
    private func receive(through channel: CharacteristicSubscription, from device: Device, peer: PeerDescription,
                         hello: Hello?, secureSession: SecureReceiverSession?, requiresSecure: Bool,
                         characteristic: RemoteGATTCharacteristic, sink: any MessageSink) async throws -> [UnacknowledgedMessage] {
        let clock = ContinuousClock()
        let subscribedAt = clock.now
        let forwardValues = InputProducer<TransferInput> { input in await channel.forward(into: input) }
        let watchDisconnection = InputProducer<TransferInput> { input in
            try? await device.waitUntilDisconnected()
            if !Task.isCancelled { input.yield(.ended("the peripheral disconnected")) }
        }
        // The ticks let the assembly notice silence and a rate too low; one more wakes the loop
        // when a stop is asked for.
        return try await withMergedInputs(forwardValues, watchDisconnection, .ticks(every: .milliseconds(500), .tick), .stopRequest(.tick)) { inputs in
            var assembly = MessageAssembly(limits: configuration.limits, sentHello: hello, idleTimeout: configuration.idleTimeout,
                                           minimumRate: configuration.minimumRate, rateGrace: configuration.rateGrace,
                                           secure: secureSession, requiresSecure: requiresSecure,
                                           keepsCheckpoints: configuration.resumeSpool != nil)
            let mtu = channel.mtu ?? 23
            var admission = AdmissionCheck()
            var announced = false
            /// The `subscribed` event, once a visit.
            func announceSubscription(_ format: TransferFormat) {
                guard !announced else { return }
                announced = true
                emit(channel.overChannel ? .subscribed(peer, mtu: mtu, format: format, transport: .l2cap)
                                         : .subscribed(peer, mtu: mtu, format: format))
            }
            var unconfirmed = UnconfirmedAcknowledgements()
            // Over a channel, the last ACKs: confirmed once the sender closes it.
            var awaitingClose: [UnacknowledgedMessage] = []
            defer {
                for ack in unconfirmed.pending {
                    progressState.rememberUnacknowledged(from: peer.address, digest: ack.digest, storedAt: ack.storedAt)
                }
            }
            func confirmAcknowledgements(_ assembly: MessageAssembly) async {
                for ack in unconfirmed.takeConfirmed(by: assembly) { await forgetReceipt(sender: ack.sender, digest: ack.digest) }
            }
            for await item in inputs {
                // A stop leaves between two inputs: a message that completed is stored and acknowledged.
                if GracefulStop.isRequested { throw StopRequested() }
                let now = clock.now - subscribedAt
                var next: MessageAssembly.Step? = assembly.handle(item, at: now)
                try await writePending(&assembly, to: channel, characteristic: characteristic)
                if case .value = item { try admission.check(assembly, at: now, sink: sink) }
                while let step = next {
                    next = nil
                    await confirmAcknowledgements(assembly)
                    switch step {
                    case .proceed(let report):
                        if let report { emitProgress(report, peer: peer) }
                    case .formatDetected(let format, let report):
                        announceSubscription(format)
                        if let report { emitProgress(report, peer: peer) }
                    case .complete(let message, let duration):
                        // A message whole in its first values completes before anything else
                        // was said about the subscription: say it first.
                        announceSubscription(assembly.isSecure ? .secure : message.format == .framed ? .framed : .compat)
                        try await takeMessage(message, duration: duration, assembly: &assembly, peer: peer,
                                              characteristic: characteristic, channel: channel, sink: sink,
                                              unconfirmed: &unconfirmed.pending, awaitingClose: &awaitingClose)
                        // Over when the sender ended the stream or this side closed with its last ACK.
                        guard assembly.expectsMoreMessages else { return awaitingClose }
                        admission.nextMessage()
                        // With `pipeline` the next message may have come meanwhile, in values read already.
                        let later = clock.now - subscribedAt
                        next = assembly.continueAfterMessage(at: later)
                        try await writePending(&assembly, to: channel, characteristic: characteristic)
                        if next != nil { try admission.check(assembly, at: later, sink: sink) }
                    case .sessionEnded:
                        await confirmAcknowledgements(assembly)
                        return awaitingClose
                    case .failed(let failure):
                        throw failure
                    }
                }
            }
            throw CancellationError()
        }
    }

    /// Does what the assembly asked of the resume spool; messages too short to be worth a
    /// checkpoint are not kept (`ResumeSpool.checkpoints`), and a removal is always done (it
    /// costs nothing when there is no entry).
    private static func keepCheckpoints(_ work: [MessageAssembly.CheckpointWork], in spool: ResumeSpool?) {
        guard let spool else { return }
        for item in work {
            switch item {
            case .append(let sender, let header, let offset, let bytes):
                if ResumeSpool.checkpoints(header) { spool.append(sender: sender, header: header, offset: offset, bytes: bytes) }
            case .remove(let sender, let header):
                spool.remove(sender: sender, header: header)
            }
        }
    }

    /// Writes what the session wrote (the secure handshake's message 2, a RESUME, PROGRESS), in
    /// order, before anything else. The sender reorders by sequence number what ATT sends out
    /// of order (commands may overtake a request in bluetoothd's queues).
    private func writePending(_ assembly: inout MessageAssembly, to channel: CharacteristicSubscription,
                              characteristic: RemoteGATTCharacteristic) async throws {
        let writeType = channel.overChannel ? .command : Self.writeType(for: characteristic.flags) ?? .command
        let unansweredType: GATTWriteType = characteristic.flags.contains(.writeWithoutResponse) ? .command : writeType
        Self.keepCheckpoints(assembly.takeCheckpointWork(), in: configuration.resumeSpool)
        for write in assembly.takeWrites() {
            do {
                try await channel.write(write.value, type: write.unanswered ? unansweredType : writeType)
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                throw TransferFailure.transient("writing to the sender failed: \(error)")
            }
        }
    }

    private func emitProgress(_ report: MessageAssembly.ProgressReport, peer: PeerDescription) {
        emit(.progress(peer, report.progress, bytesPerSecond: report.bytesPerSecond, secondsRemaining: report.secondsRemaining))
    }

    /// Apple's `cleanup()` order: unsubscribe, then disconnect. The device is also removed
    /// from BlueZ's cache (unless paired), after a success too, so the next scan sees it only
    /// when it really advertises again, not a cached entry of a sender that finished and left.
    ///
    /// The removal is asked for right after the unsubscription, and without waiting for the
    /// reply (`requestRemoval`): `RemoveDevice` on a connected, unpaired device makes
    /// bluetoothd disconnect it (after its 2 s disconnect timer) and remove it as the link
    /// drops, whether or not anyone waits (adapter-api.txt; BlueZ's adapter.c). So a run that
    /// ends meanwhile (its deadline, SIGTERM) still leaves no cached entry behind. That entry
    /// would hide the sender from later scans: once BlueZ has resolved a device's services it
    /// ignores the UUIDs in its advertisements (device.c `device_add_eir_uuids`), and a sender
    /// that stopped while we were connected has removed its service from that resolved list.
    ///
    /// `handingBack`: the run ends with this visit (the last wanted message is stored and
    /// acknowledged), so the user gets control back at once instead of after the disconnection
    /// (about 3 s): the request is on the bus within `handBackWait` and bluetoothd finishes the
    /// rest on its own. Otherwise the visit waits, bounded, until the link is down, so the next
    /// scan does not meet a sender still paused for this link.
    private func cleanUp(channel: CharacteristicSubscription?, device: Device, adapter: Adapter,
                         peer: PeerDescription, handingBack: Bool = false) async {
        let wasConnected = device.properties?.connected ?? false
        let remove = !(device.properties?.paired ?? false)
        let returnAtOnce = handingBack && remove
        await boundedCleanup(limit: returnAtOnce ? configuration.handBackWait : .seconds(10)) {
            await channel?.close()
            if remove { try? await adapter.requestRemoval(of: device) }
            guard !returnAtOnce else { return }
            if !remove { try? await device.disconnect() }
            try? await device.waitUntilDisconnected()
        }
        if wasConnected || channel != nil { emit(.disconnected(peer)) }
    }

    /// The characteristic a visit transfers through and, when the sender has one, its L2CAP
    /// channel (which then carries the HELLO, the values and our writes).
    ///
    /// A sender whose channel opened on the last visit gets it again at once, on the PSM it
    /// published then, without waiting for BlueZ to discover the services: on a loaded host
    /// that takes a second or more after each connection, and the channel needs none of them
    /// (the handshake, not the service, tells who the sender is). Its characteristic is the one
    /// resolved then, carried but not used over a channel. A PSM that no longer answers (the
    /// sender restarted) is forgotten and the visit takes the usual path, as after any failed
    /// visit.
    private func transferCharacteristicAndChannel(on device: Device, adapter: Adapter, peer: PeerDescription) async throws
        -> (RemoteGATTCharacteristic, CharacteristicSubscription?) {
        if configuration.requestFramed, let known = progressState.knownChannel(of: peer.address) {
            do {
                let socket = try await connectChannel(to: device, psm: known.psm, adapter: adapter)
                return (known.characteristic, .channel(socket, characteristic: known.characteristic))
            } catch {
                // Nothing to tell: the usual path follows, and says what it finds.
                progressState.forgetChannel(of: peer.address)
            }
        }
        let characteristic = try await resolveCharacteristic(on: device)
        guard let (socket, psm) = await openChannel(on: device, adapter: adapter, peer: peer) else { return (characteristic, nil) }
        progressState.rememberChannel(of: peer.address, KnownChannel(psm: psm, characteristic: characteristic))
        return (characteristic, .channel(socket, characteristic: characteristic))
    }

    /// The sender's L2CAP channel (framed version 2's `channel`) and its PSM, when its service
    /// publishes one and the channel opens within `channelConnectTimeout`; nil otherwise (no
    /// channel characteristic: Apple's sample, bless, an older bletransfer; `--no-l2cap`), and
    /// the visit goes on over GATT. A failure is one warning line; the PSM must be an LE dynamic
    /// one (0x0080–0x00FF), so a hostile sender cannot point us at a fixed channel such as EATT's.
    private func openChannel(on device: Device, adapter: Adapter, peer: PeerDescription) async -> (NotificationSocket, UInt16)? {
        guard configuration.requestFramed, configuration.channelTransport != nil,
              let published = try? device.characteristic(service: configuration.serviceUUID.canonical,
                                                         characteristic: TransferUUIDs.channelPSMCharacteristic.canonical)
        else { return nil }
        let limit = configuration.channelConnectTimeout
        do {
            let value = try await withTimeLimit(limit, onTimeout: { L2CAPChannelError.timedOut }) {
                try await published.readValue()
            }
            guard value.count == 2 else {
                emit(.warning("\(EventText.describe(peer)) publishes an L2CAP channel as \(value.count) bytes, not a PSM; using GATT notifications"))
                return nil
            }
            let psm = UInt16(value[0]) | UInt16(value[1]) << 8
            guard (0x0080...0x00FF).contains(psm) else {
                emit(.warning("\(EventText.describe(peer)) publishes PSM \(psm), not an LE dynamic one; using GATT notifications"))
                return nil
            }
            return (try await connectChannel(to: device, psm: psm, adapter: adapter), psm)
        } catch let error as BluetoothError {
            if case .accessDenied = error { return nil }
            emit(.warning("could not read the L2CAP channel of \(EventText.describe(peer)) (\(error)); using GATT notifications"))
            return nil
        } catch {
            if Task.isCancelled { return nil }
            emit(.warning("could not open the L2CAP channel of \(EventText.describe(peer)) (\(error)); using GATT notifications"))
            return nil
        }
    }

    /// Connects to the connected `device`'s channel on `psm` within `channelConnectTimeout`.
    private func connectChannel(to device: Device, psm: UInt16, adapter: Adapter) async throws -> NotificationSocket {
        guard let transport = configuration.channelTransport, let remote = device.properties else {
            throw L2CAPChannelError.closed
        }
        let local = adapter.properties
        return try await withTimeLimit(configuration.channelConnectTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
            try await transport.connect(adapter: local?.address, addressType: LEAddressType(bluez: local?.addressType),
                                        to: remote.address, peerType: LEAddressType(bluez: remote.addressType),
                                        psm: psm, receiveMTU: SequencedStream.channelValueLengths.upperBound)
        }
    }

    // MARK: Helpers

    private func emit(_ event: RoleEvent) {
        continuation.yield(event)
    }

    /// Failures that no retry of this peer can fix: they end the work (the state machine
    /// takes over when bluetoothd or the adapter went away).
    private static func rethrowIfFatal(_ error: BluetoothError) throws {
        switch error {
        case .accessDenied(let message):
            throw RoleFailure(.permissionDenied, BluetoothError.accessDenied(message).description)
        case .systemBusUnavailable, .bluetoothdNotRunning:
            throw error
        default:
            return
        }
    }

    /// HELLO and ACK go as write requests when the characteristic takes them: the reply then
    /// means the peripheral has the value (the HELLO before we subscribe, the ACK before we
    /// disconnect). Apple's characteristic offers only write-without-response.
    static func writeType(for flags: [GATTCharacteristicFlag]) -> GATTWriteType? {
        if flags.contains(.write) { return .request }
        if flags.contains(.writeWithoutResponse) { return .command }
        return nil
    }

    static func describe(_ error: any Error) -> String {
        if let failure = error as? any ClassifiedFailure { return failure.userMessage }
        return "\(error)"
    }
}

/// Run-wide bookkeeping shared by the supervisor and the work task.
final class RunState: Sendable {
    private struct Inner {
        var book: PeerBook
        var received = 0
        var sequence = 0
        var fallbackNoticed = false
        var unauthenticatedNoticed = false
        /// Per peer address, the last messages whose ACK was not confirmed, oldest first (two at
        /// most: a pipelined sender has two unacknowledged).
        var unacknowledged = BoundedAddressTable<[UnacknowledgedMessage]>(capacity: RunState.addressCapacity)
        var visit = ""
        /// Per sender address, the channel its last visit opened.
        var knownChannels = BoundedAddressTable<KnownChannel>(capacity: RunState.addressCapacity)
    }

    private let inner: Mutex<Inner>
    private let started = ContinuousClock.now

    init(book: PeerBook) {
        inner = Mutex(Inner(book: book))
    }

    var elapsed: Duration { ContinuousClock.now - started }
    var receivedSnapshot: Int { inner.withLock { $0.received } }

    func nextSequence() -> Int {
        inner.withLock { state in
            state.sequence += 1
            return state.sequence
        }
    }

    /// True the first time only.
    func firstUnauthenticatedNotice() -> Bool {
        inner.withLock { state in
            defer { state.unauthenticatedNoticed = true }
            return !state.unauthenticatedNoticed
        }
    }

    /// True the first time only.
    func firstFallbackNotice() -> Bool {
        inner.withLock { state in
            defer { state.fallbackNoticed = true }
            return !state.fallbackNoticed
        }
    }

    func markReceived() {
        inner.withLock { $0.received += 1 }
    }

    /// A token of the visit under way: receipts it wrote are not taken for earlier copies.
    var visit: String { inner.withLock { $0.visit } }

    func beginVisit() {
        inner.withLock { $0.visit = UUID().uuidString }
    }

    /// A message stored whose ACK was not confirmed: its sender may send it again.
    func rememberUnacknowledged(from address: String, digest: [UInt8], storedAt: String?) {
        inner.withLock { state in
            var messages = state.unacknowledged[address] ?? []
            messages.append(UnacknowledgedMessage(digest: digest, storedAt: storedAt))
            if messages.count > Self.unacknowledgedPerPeer { messages.removeFirst(messages.count - Self.unacknowledgedPerPeer) }
            // Rotating addresses must not grow this table: the oldest entry goes (its sender
            // then may get its message stored twice, never lost).
            state.unacknowledged.set(messages, for: address)
        }
    }

    /// The channel of `address`'s last visit, if it opened and no visit failed since.
    func knownChannel(of address: String) -> KnownChannel? {
        inner.withLock { $0.knownChannels[address] }
    }

    func rememberChannel(of address: String, _ channel: KnownChannel) {
        inner.withLock { $0.knownChannels.set(channel, for: address) }
    }

    func forgetChannel(of address: String) {
        inner.withLock { _ = $0.knownChannels.removeValue(for: address) }
    }

    /// How many peer addresses each per-address table keeps (unconfirmed ACKs, known channels).
    static let addressCapacity = 256
    /// Unconfirmed ACKs kept per address: the sender's window (`pipeline`).
    static let unacknowledgedPerPeer = PipelineWindow.messages

    var unacknowledgedCount: Int { inner.withLock { $0.unacknowledged.count } }

    /// The earlier copy when `digest` is a message from `address` whose ACK was not confirmed
    /// (forgotten then, with those remembered before it: a sender sends again in order, so it
    /// has moved past them; a third identical message is a new one); nil otherwise. Any other
    /// message from that peer means the sender moved on, so the records go too.
    func takeUnacknowledged(from address: String, digest: [UInt8]) -> UnacknowledgedMessage? {
        inner.withLock { state in
            guard var messages = state.unacknowledged.removeValue(for: address) else { return nil }
            guard let index = messages.firstIndex(where: { $0.digest == digest }) else { return nil }
            let earlier = messages[index]
            messages.removeFirst(index + 1)
            if !messages.isEmpty { state.unacknowledged.set(messages, for: address) }
            return earlier
        }
    }

    func withBook<T>(_ body: (inout PeerBook) -> T) -> T {
        inner.withLock { body(&$0.book) }
    }
}
