import BlueZ
import DaemonSupport
import Logging
import Machines
import Storage
import Synchronization
import SystemCalls
import Transfer

/// Where a connection's delivered messages are counted: the source is told, the run counts it,
/// the event says so. Handed to each connection, which does this on its machine's `deliver`.
struct SenderDeliveries: Sendable {
    let source: any MessageSource
    let counter: DeliveryCounter
    let emit: @Sendable (RoleEvent) -> Void

    func deliver(_ offer: SenderConnection.Offer, _ summary: MessageSummary, to peer: PeerDescription) async {
        await source.markDelivered(offer.message, summary: summary, to: peer)
        await counter.recordDelivery()
        emit(.delivered(summary, to: peer))
    }
}

/// What every connection of a serving period uses besides its link: the events, the log, the facts BlueZ knows (the
/// central's name, whether Bluetooth is up, the link's bearers) and the disconnection of a central that missed a bound.
struct SenderEnvironment: Sendable {
    let logger: Logger
    let emit: @Sendable (RoleEvent) -> Void
    let describePeer: @Sendable (DeviceReference?) -> PeerDescription
    let bluetoothStillUp: @Sendable () -> Bool
    let linkExposure: @Sendable (_ address: String) -> EnhancedATTExposure
    let disconnectDevice: @Sendable (_ device: DeviceReference) async -> Void
    let deliveries: SenderDeliveries
    /// The activity the engine reads (a one-message delivery, an addressee elsewhere).
    let activity: AsyncStream<ServerActivity>.Continuation
    /// The unauthenticated-key notice is given once per run.
    let unauthenticatedNotice = OnceFlag()
    /// Secure mode: payload bytes put on the air per message (by SHA-256), over all its visits.
    let onAir = OnAirTally()

    /// Disconnects `device`, when known, in a task of its own: the call reaches bluetoothd even when the connection
    /// ends meanwhile, and holds up neither the connection nor the server's actor.
    func disconnect(_ device: DeviceReference?) {
        guard let device else { return }
        _ = startOutsideCancellation { [disconnectDevice] in await disconnectDevice(device) }
    }
}

/// How a connection ended, for the server: whether the characteristic is announced free, the
/// messages it delivered, and the message it took from the source and did not deliver.
struct ConnectionOutcome: Sendable {
    let id: Int
    let announce: Bool
    let deliveredSequences: [Int]
    let offerTaken: SenderConnection.Offer?
}

/// One connection's task: it owns the link, reads one input at a time (the link's answers, the central's writes and
/// hang-up from the server, timers, the source's answers), hands it to the `SenderConnection` machine and performs
/// the actions it returns. Its children are the writer (values to the link, one at a time), the link's reader, the
/// timers and the source's worker (requests in order; deliveries are finished even after the connection ended).
struct SenderConnectionShell: Sendable {
    let id: Int
    let machine: SenderConnection
    let startActions: [SenderConnection.Action]
    let link: SenderLink
    let device: DeviceReference?
    let inputs: AsyncStream<SenderConnection.Input>
    let post: AsyncStream<SenderConnection.Input>.Continuation
    let environment: SenderEnvironment

    /// The writer's work: a value to hand over, or the drain after `EOM`.
    enum WriterJob: Sendable {
        case send([UInt8])
        case drain
    }

    enum SourceJob: Sendable {
        case deliver(SenderConnection.Offer, MessageSummary, engineOffersNext: Bool)
        case ask(SenderConnection.SourceRequest)
    }

    struct Children {
        let writer: AsyncStream<WriterJob>.Continuation
        let source: AsyncStream<SourceJob>.Continuation
    }

    func run() async -> ConnectionOutcome {
        var machine = machine
        let (writerJobs, writer) = AsyncStream<WriterJob>.makeStream()
        let (sourceJobs, source) = AsyncStream<SourceJob>.makeStream()
        let over = ClosedFlag()
        var announce = true
        await withDiscardingTaskGroup { group in
            group.addTask { await work(through: sourceJobs, over: over) }
            await withDiscardingTaskGroup { linkTasks in
                linkTasks.addTask { await write(writerJobs) }
                if let read = link.read {
                    let post = self.post
                    let reason = link.hangUpReason
                    let indications = machine.confirmsIndications
                    linkTasks.addTask {
                        await read(indications, post)
                        post.yield(.hungUp(reason: reason, drainedWhenClosed: nil))
                    }
                }
                let children = Children(writer: writer, source: source)
                let clock = ContinuousClock()
                let started = clock.now
                announce = perform(startActions, on: &machine, children: children, tasks: &linkTasks, at: .zero) ?? true
                for await input in inputs where !machine.isOver {
                    let actions = machine.handle(input, at: clock.now - started)
                    if let ended = perform(actions, on: &machine, children: children, tasks: &linkTasks, at: clock.now - started) {
                        announce = ended
                        break
                    }
                }
                if !machine.isOver {
                    // Cancelled with the period (the adapter left, the run's grace ran out): the
                    // machine still reports what the central did not get.
                    let reason = GracefulStop.isRequested ? "the sender was stopped" : "Bluetooth is not available any more"
                    let actions = machine.handle(.shutDown(reason: reason), at: clock.now - started)
                    announce = perform(actions, on: &machine, children: children, tasks: &linkTasks, at: clock.now - started) ?? false
                }
                over.set()
                link.channel.close()
                writer.finish()
                linkTasks.cancelAll()
            }
            source.finish()
        }
        post.finish()
        return ConnectionOutcome(id: id, announce: announce, deliveredSequences: machine.deliveredSequences,
                                 offerTaken: machine.offerTaken)
    }

    /// Carries out `actions` in order; returns the announcement of the connection's end, or nil while it goes on.
    private func perform(_ actions: [SenderConnection.Action], on machine: inout SenderConnection, children: Children,
                         tasks: inout DiscardingTaskGroup, at now: Duration) -> Bool? {
        var queue = actions[...]
        var ended: Bool?
        while let action = queue.popFirst() {
            switch action {
            case .send(let value): children.writer.yield(.send(value))
            case .drain: children.writer.yield(.drain)
            case .readPayload(let payload, let range):
                let post = self.post
                // The file is read on a thread of its own: a slow disk holds up no other task.
                tasks.addTask {
                    do throws(PayloadReadError) {
                        let bytes = try await BlockingCalls.run { () throws(PayloadReadError) in try payload.bytes(in: range) }
                        post.yield(.payloadRead(offset: range.lowerBound, bytes: bytes))
                    } catch { post.yield(.payloadUnreadable(error.description)) }
                }
            case .closeChannel: link.channel.close()
            case .ask(let request): children.source.yield(.ask(request))
            case .deliver(let offer, var summary, let engineOffersNext):
                if summary.format == .secure { summary.payloadBytesOnAir = environment.onAir.take(offer.message.digest) }
                children.source.yield(.deliver(offer, summary, engineOffersNext: engineOffersNext))
            case .tallyOnAir(let digest, let bytes): environment.onAir.add(bytes, for: digest)
            case .report(let report): self.report(report, peer: machine.peer)
            case .noticeUnauthenticated(let peer):
                if environment.unauthenticatedNotice.first() {
                    environment.emit(.warning(EventText.unauthenticatedNotice(peer: "the central", key: peer)))
                }
            case .addressedElsewhere(let peer): environment.activity.yield(.addressedElsewhere(peer))
            case .startTimer(let timer, let duration):
                let post = self.post
                tasks.addTask {
                    // A cancelled or restarted timer fires into nothing (the machine knows its generation).
                    guard (try? await Task.sleep(for: duration)) != nil else { return }
                    post.yield(.timerFired(timer))
                }
            case .cancelTimer: break
            case .checkBluetooth:
                // Answered at once: what Bluetooth's state is as the timer fires.
                let exposure = environment.linkExposure(machine.peer.address)
                queue.append(contentsOf: machine.handle(
                    .bluetoothChecked(up: environment.bluetoothStillUp(), reorderRisk: exposure.mayReorder ? exposure.summary : nil),
                    at: now))
            case .disconnect: environment.disconnect(device)
            case .end(let announce): ended = announce
            }
        }
        return ended
    }

    private func report(_ report: SenderConnection.Report, peer: PeerDescription) {
        switch report {
        case .progress(let progress, let rate, let remaining):
            environment.emit(.progress(peer, progress, bytesPerSecond: rate, secondsRemaining: remaining))
        case .aborted(let reason): environment.emit(.transferAborted(peer, reason: reason))
        case .dropped(let reason): environment.emit(.centralDropped(peer, reason: reason))
        case .warning(let text): environment.emit(.warning(text))
        case .debug(let text): environment.logger.debug("\(text)")
        case .info(let text): environment.logger.info("\(text)")
        }
    }

    /// Hands each value to the link and reports it taken, or why not. Waiting for room on the
    /// socket (back-pressure) holds nothing else up: the loop reads its inputs meanwhile.
    private func write(_ jobs: AsyncStream<WriterJob>) async {
        let channel = link.channel
        for await job in jobs {
            do {
                switch job {
                case .send(let value):
                    try await channel.send(value)
                    post.yield(.sent)
                case .drain:
                    try await channel.drain()
                    post.yield(.drained)
                }
            } catch { post.yield(.sendFailed(Self.failure(error))) }
        }
    }

    static func failure(_ error: any Error) -> SubscriptionDelivery.TransferFailure {
        switch error {
        case NotificationSocketError.closedByPeer: .closedByPeer
        case is CancellationError, NotificationSocketError.closed:
            .stoppedByUs   // we stopped it; whoever did reports why
        default: .other("\(error)")
        }
    }

    /// The source's work, in the order the machine asked: deliveries (always carried out, even once the connection is
    /// over: the message was counted) and requests (answered while the connection lasts).
    private func work(through jobs: AsyncStream<SourceJob>, over: ClosedFlag) async {
        let deliveries = environment.deliveries
        for await job in jobs {
            switch job {
            case .deliver(let offer, let summary, let engineOffersNext):
                await deliveries.deliver(offer, summary, to: machine.peer)
                if engineOffersNext { environment.activity.yield(.delivered(sequence: offer.sequence)) }
            case .ask(let request):
                guard !over.isSet else { continue }
                switch request {
                case .nextAvailable:
                    let next = await deliveries.source.nextAvailableNow()
                    let sequence = await deliveries.counter.nextSequence
                    post.yield(.nextMessage(next.map { SenderConnection.Offer($0, sequence: sequence) }))
                case .upcoming(let skipping):
                    post.yield(.upcoming(await deliveries.source.upcomingNow(skipping: skipping)))
                case .prepare(let skipping): _ = await deliveries.source.upcomingNow(skipping: skipping)
                }
            }
        }
    }
}

/// A flag that is true the first time it is asked, from any task.
final class OnceFlag: Sendable {
    private let asked = Mutex(false)

    func first() -> Bool {
        asked.withLock { asked in
            defer { asked = true }
            return !asked
        }
    }
}

/// Payload bytes put on the air per message (by SHA-256) over all visits of this process until
/// it is delivered: what resume saves shows here. Bounded (cleared past `capacity` messages).
final class OnAirTally: Sendable {
    static let capacity = 1024
    private let bytes = Mutex<[[UInt8]: Int]>([:])

    func add(_ count: Int, for digest: [UInt8]) {
        bytes.withLock { bytes in
            if bytes[digest] == nil, bytes.count >= Self.capacity { bytes = [:] }
            bytes[digest, default: 0] += count
        }
    }

    func take(_ digest: [UInt8]) -> Int? { bytes.withLock { $0.removeValue(forKey: digest) } }
}
