import BlueZ
import DaemonSupport
import Machines
import Storage
import SystemCalls
import Transfer
import Trust

struct VisitLink: Sendable {
    let subscription: CharacteristicSubscription
    let device: Device
    let characteristic: RemoteGATTCharacteristic
    let peer: PeerDescription

    /// How the session's values and the ACK go (over a channel every write is an SDU, nothing
    /// answers it, like a write command), and how a value nothing waits for goes.
    var writeType: GATTWriteType {
        subscription.overChannel ? .command : Central.writeType(for: characteristic.flags) ?? .command
    }
    var unansweredWriteType: GATTWriteType {
        characteristic.flags.contains(.writeWithoutResponse) ? .command : writeType
    }
}

/// The visit's loop: each input (a value, the link's end, a tick) goes to the `ReceiverVisit` machine, whose effects
/// are performed here in order — the writes, the resume spool, the room on disk, storing (receipt journal, sink), the
/// ACK, reports — each answer fed back before the next input is read.
extension Central {
    /// Receives through `link` until the visit is over (one message, or in a secure session that carries several, each
    /// in turn until the sender closes or the run has all it wants), watching for the peer leaving and for silence.
    /// Each message is stored and acknowledged as it completes. Throws the `TransferFailure` that ended the visit.
    func receive(over link: VisitLink, secureSession: SecureReceiverSession?, requiresSecure: Bool,
                 sink: any MessageSink) async throws {
        let clock = ContinuousClock()
        let subscribedAt = clock.now
        let subscription = link.subscription
        let device = link.device
        let forwardValues = InputProducer<TransferInput> { input in await subscription.forward(into: input) }
        let watchDisconnection = InputProducer<TransferInput> { input in
            try? await device.waitUntilDisconnected()
            if !Task.isCancelled { input.yield(.ended("the peripheral disconnected")) }
        }
        let assembly = MessageAssembly(limits: configuration.limits, idleTimeout: configuration.idleTimeout,
                                       minimumRate: configuration.minimumRate, rateGrace: configuration.rateGrace,
                                       secure: secureSession, requiresSecure: requiresSecure,
                                       keepsCheckpoints: configuration.resumeSpool != nil)
        let facts = ReceiverVisit.Facts(
            peer: link.peer, overChannel: subscription.overChannel, offeredAsCommand: link.writeType == .command,
            commandAllowed: link.characteristic.flags.contains(.writeWithoutResponse),
            messageCount: configuration.messageCount, receivedBefore: progressState.receivedSnapshot)
        var visit = ReceiverVisit(facts: facts, assembly: assembly,
                                  remembered: progressState.takeStoredMessages(of: link.peer.address))
        var incoming: IncomingPayload?
        defer { progressState.putStoredMessages(visit.rememberedNow, of: link.peer.address) }
        // The ticks let the assembly notice silence and a rate too low; one more wakes the loop when a stop is asked.
        try await withMergedInputs(forwardValues, watchDisconnection, .ticks(every: .milliseconds(500), .tick),
                                   .stopRequest(.tick)) { inputs in
            for await item in inputs {
                // A stop leaves between two inputs: a message that completed is stored and acknowledged.
                if GracefulStop.isRequested { throw StopRequested() }
                let actions = visit.handle(.transfer(item), at: clock.now - subscribedAt)
                try await perform(actions, on: &visit, incoming: &incoming, link: link, sink: sink) { clock.now - subscribedAt }
                if visit.isOver { return }
            }
            throw CancellationError()
        }
    }

    /// Carries out the visit's effects in order, feeding each answer back at once; throws the failure it finished with.
    private func perform(_ actions: [ReceiverVisit.Action], on visit: inout ReceiverVisit, incoming: inout IncomingPayload?,
                         link: VisitLink, sink: any MessageSink, now: () -> Duration) async throws {
        var queue = actions[...]
        while let action = queue.popFirst() {
            var answer: ReceiverVisit.Input?
            switch action {
            case .write(let value, let unanswered):
                do {
                    try await link.subscription.write(value, type: unanswered ? link.unansweredWriteType : link.writeType)
                } catch let error as BluetoothError {
                    try Self.rethrowIfFatal(error)
                    answer = .writeFailed("\(error)")
                }
            case .checkpoint(let work): Self.keepCheckpoint(work, in: configuration.resumeSpool)
            case .keepPayload(let work): answer = await keep(work, in: &incoming, sink: sink)
            case .lookUpCheckpoint(let sender, let header):
                answer = await copyCheckpoint(of: header, from: sender, into: &incoming)
            case .checkRoom(let question):
                let refusal: StorageRefusal? = switch question {
                case .announced(let bytes): sink.admissionRefusal(announced: bytes)
                case .writing(let announced, let received): sink.writeRefusal(announced: announced, received: received)
                case .received(let bytes): sink.admissionRefusal(byteCount: bytes)
                }
                answer = .room(refusal.map { ReceiverVisit.RoomRefusal(bound: $0.bound.rawValue, reason: $0.reason) })
            case .store(var message, let sender):
                // A secure message's bytes are the ones kept as they came.
                if message.format == .secure, let incoming { message.body = incoming.payload }
                answer = .stored(try await store(message, sender: sender, from: link.peer, sink: sink))
            case .writeAcknowledgement(let values, let asCommand, let settles):
                answer = .acknowledgementWritten(failure: await writeAcknowledgement(values, asCommand: asCommand,
                                                                                     settles: settles, link: link))
            case .forgetReceipt(let sender, let digest):
                // The journal keeps the message a while longer (a sender killed before it moved
                // its file to `sent/` offers it again), then forgets it.
                await configuration.receiptJournal?.recordAcknowledged(sender: sender, digest: lowercaseHex(digest))
            case .countReceived: progressState.markReceived()
            case .awaitSenderClose:
                answer = .senderClosed(await link.subscription.waitForSenderClose(limit: configuration.channelCloseWait))
            case .report(let report): self.report(report, link: link)
            case .finish(let failure): if let failure { throw failure }
            }
            if let answer {
                let more = visit.handle(answer, at: now())
                // A failed write ends the visit: what was to follow it is not done.
                if visit.isOver, answer.endsTheVisit { queue = more[...] } else { queue += more }
            }
        }
    }

    /// Keeps a secure message's bytes as its sink wants (partial file, memory); nil, or the answer ending the visit.
    private func keep(_ work: MessageAssembly.PayloadWork, in incoming: inout IncomingPayload?,
                      sink: any MessageSink) async -> ReceiverVisit.Input? {
        do throws(PayloadReadError) {
            switch work {
            case .begin(let header):
                incoming = try await IncomingPayload.make(length: header.payloadLength, in: sink.partialPayloadStore)
            case .write(let offset, let bytes): try await incoming?.write(bytes, at: offset)
            }
            return nil
        } catch { return .payloadNotKept(error.description) }
    }

    /// The checkpoint an earlier visit left of the message of `header`, copied to where the message's bytes go
    /// (nothing when the spool holds none, or the message is too short to have one).
    private func copyCheckpoint(of header: MessageHeader, from sender: PeerKey?,
                                into incoming: inout IncomingPayload?) async -> ReceiverVisit.Input {
        guard let spool = configuration.resumeSpool, ResumeSpool.checkpoints(header), incoming != nil else {
            return .checkpointHeld(bytes: 0, digest: nil)
        }
        let held = await BlockingCalls.run { spool.heldPrefixFile(sender: sender, header: header) }
        guard !held.isEmpty else { return .checkpointHeld(bytes: 0, digest: nil) }
        do throws(PayloadReadError) {
            let digest = try await incoming?.copyCheckpoint(held)
            return .checkpointHeld(bytes: held.count, digest: digest)
        } catch { return .payloadNotKept(error.description) }
    }

    /// Writes the ACK's values; nil when they went, or why not.
    private func writeAcknowledgement(_ values: [[UInt8]], asCommand: Bool, settles: Bool, link: VisitLink) async -> String? {
        do {
            for value in values { try await link.subscription.write(value, type: asCommand ? .command : .request) }
        } catch { return Self.describe(error) }
        // A write command has no completion: bluetoothd replies once it queued it, and a Disconnect issued at once
        // can overtake it on a slow link. No signal tells when it left, so give the link a moment.
        if settles { try? await Task.sleep(for: configuration.acknowledgementSettle) }
        return nil
    }

    /// Stores a complete, verified message unless an earlier run did (the receipt journal knows), journalled on disk
    /// first so no crash stores it twice. A message the sink refuses is a refusal: no ACK, the sender keeps it.
    private func store(_ message: ReceivedMessage, sender: String, from peer: PeerDescription,
                       sink: any MessageSink) async throws -> ReceiverVisit.StoreOutcome {
        let journal = configuration.receiptJournal
        let visit = progressState.visit
        let digest = message.digest.map { lowercaseHex($0) }
        if let journal, let digest,
           let found = await journal.findEarlierCopy(sender: sender, digest: digest, size: message.byteCount, excludingVisit: visit) {
            return .storedBefore(at: found)
        }
        let sequence = progressState.nextSequence()
        if let digest {
            await journal?.recordWillStore(sender: sender, digest: digest, size: message.byteCount, name: message.file?.name, visit: visit)
        }
        let storedAt: String?
        do {
            storedAt = try await sink.store(message, sequence: sequence, from: peer)
        } catch let refusal as MessageRefused {
            if let digest { await journal?.recordForgotten(sender: sender, digest: digest) }
            return .refused(refusal.reason)
        }
        if let digest { await journal?.recordStored(sender: sender, digest: digest, visit: visit, at: storedAt) }
        return .stored(sequence: sequence, at: storedAt)
    }

    private func report(_ report: ReceiverVisit.Report, link: VisitLink) {
        let peer = link.peer
        switch report {
        case .subscribed(let format):
            let mtu = link.subscription.mtu ?? 23
            emit(.subscribed(peer, mtu: mtu, format: format, transport: link.subscription.overChannel ? .l2cap : .gatt))
        case .progress(let report):
            emit(.progress(peer, report.progress, bytesPerSecond: report.bytesPerSecond, secondsRemaining: report.secondsRemaining))
        case .received(var summary, let storedAt):
            if summary.format == .compat {
                // Compat values carry no sequence numbers: on a link with several ATT bearers
                // BlueZ may have handed them over out of order.
                let exposure = configuration.linkExposure(peer.address)
                if exposure.mayReorder {
                    summary.ordering = .atRisk(because: "the link has \(exposure.summary)")
                    emit(.warning("message \(summary.sequence) from \(EventText.describe(peer)) came in Apple's format over "
                        + "a link with \(exposure.summary): its bytes may be out of order and nothing in that "
                        + "format can tell. Set [GATT] Channels = 1 in /etc/bluetooth/main.conf on either host"))
                }
            }
            emit(.received(summary, from: peer, storedAt: storedAt))
        case .warning(let text): emit(.warning(text))
        case .unauthenticated(let key):
            if progressState.unauthenticatedNotice.first() {
                emit(.warning(EventText.unauthenticatedNotice(peer: "the sender", key: key)))
            }
        }
    }

    /// Does what the assembly asked of the resume spool; messages too short to be worth a checkpoint are not kept
    /// (`ResumeSpool.checkpoints`), and a removal is always done (it costs nothing when there is no entry).
    static func keepCheckpoint(_ work: MessageAssembly.CheckpointWork, in spool: ResumeSpool?) {
        guard let spool else { return }
        switch work {
        case .append(let sender, let header, let offset, let bytes):
            if ResumeSpool.checkpoints(header) { spool.append(sender: sender, header: header, offset: offset, bytes: bytes) }
        case .remove(let sender, let header): spool.remove(sender: sender, header: header)
        case .lookUp:
            break   // answered by `copyCheckpoint`
        }
    }
}

extension ReceiverVisit.Input {
    /// An answer after which what was to follow it is not done (the visit ends on it).
    var endsTheVisit: Bool {
        switch self {
        case .writeFailed, .payloadNotKept: true
        default: false
        }
    }
}
