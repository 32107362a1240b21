@testable import Machines
import Testing
import TestSupport
import Transfer
import SystemCalls
import Trust

/// The sender's connection machine without a bus or a file: named paths with what they must
/// do, every step in every state reachable with small messages, and seeded random sequences,
/// checked against the rules (a message is delivered at most once and never before its ACK;
/// nothing happens after the end; an abort ends the connection; every timer is resolved).
@Suite struct SenderConnectionTests {
    typealias Action = SenderConnection.Action
    typealias Step = SenderWorld.Step

    static let setups: [SenderWorld.Setup] = [
        .init(secure: false, indications: false, followers: 0),
        .init(secure: false, indications: true, followers: 0),
        .init(secure: true, indications: false, followers: 0),
        .init(secure: true, indications: true, followers: 0),
        .init(secure: true, indications: false, followers: 2),
    ]

    /// Runs the world the way a healthy link and central would until nothing more happens.
    static func runHealthy(_ world: inout SenderWorld, answer serve: Bool = true, confirm: Bool = true) {
        var progressed = true
        while progressed, !world.machine.isOver {
            progressed = false
            for step: Step in [.linkTakes, .confirm, .centralWrites, .answer(serve: serve)] {
                if step == .confirm, !confirm || world.machine.unconfirmed == 0 { continue }
                if world.take(step) != nil { progressed = true }
            }
            if world.draining, world.take(.raw(.drained)) != nil { progressed = true }
        }
    }

    static func dropped(in actions: [Action]) -> [String] {
        actions.compactMap { if case .report(.dropped(let reason)) = $0 { reason } else { nil } }
    }

    // MARK: Named paths

    @Test func compatIsDeliveredOnceBluetoothIsStillUpAfterTheCentralLeft() {
        var world = SenderWorld(.init(secure: false, indications: false, followers: 0))
        Self.runHealthy(&world)
        #expect(world.received.last == WireFormat.endOfMessage)
        #expect(Array(world.received.dropLast().joined()) == SenderWorld.message(0, length: 30).payload)
        #expect(world.delivered.isEmpty, "EOM drained is not enough")
        _ = world.take(.raw(.hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil)))
        #expect(world.delivered.isEmpty)
        let check = world.take(.fire(.delivery(.compatConfirmation)))
        #expect(check?.actions.contains(.checkBluetooth) == true)
        let answer = world.take(.raw(.bluetoothChecked(up: true, reorderRisk: "2 enhanced ATT bearers")))
        let deliver = answer?.actions.first { if case .deliver = $0 { true } else { false } }
        guard case .deliver(let offer, let summary, let engineOffersNext) = deliver else {
            Issue.record("no delivery: \(world.trace)")
            return
        }
        #expect(offer.sequence == 1 && engineOffersNext)
        #expect(summary.ordering == .atRisk(because: "has 2 enhanced ATT bearers"))
        #expect(world.ended == true && world.machine.runningTimers.isEmpty)
    }

    @Test func withIndicationsTheNextValueWaitsForTheConfirmation() {
        var world = SenderWorld(.init(secure: false, indications: true, followers: 0, payloadLength: 400))
        #expect(world.take(.linkTakes)?.actions.contains { if case .send = $0 { true } else { false } } == false)
        #expect(world.inFlight == nil, "nothing sent before the confirmation")
        #expect(world.take(.confirm)?.actions.contains { if case .send = $0 { true } else { false } } == true)
    }

    @Test func aSecureMessageIsDeliveredOnlyOnTheCentralsAck() {
        var world = SenderWorld(.init(secure: true, indications: false, followers: 0))
        // Everything but the ACK: the central's writes are held back once it verified the message.
        var steps = 0
        while world.verified.isEmpty, steps < 200 {
            steps += 1
            if world.take(.linkTakes) == nil, world.take(.centralWrites) == nil { break }
        }
        #expect(world.verified.count == 1)
        while world.take(.linkTakes) != nil {}
        if world.draining { _ = world.take(.raw(.drained)) }
        #expect(world.delivered.isEmpty, "verified by the central, not yet acknowledged to the sender")
        let ack = world.take(.centralWrites)
        #expect(ack?.actions.contains { if case .deliver(_, let summary, true) = $0 { summary.format == .secure } else { false } } == true)
        #expect(world.machine.authenticatedPeer?.isListed == false)
        // It stays subscribed: the unsubscribe bound runs, and its end frees the characteristic.
        #expect(world.machine.armed[.delivery(.deadline)] != nil)
        _ = world.take(.raw(.hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil)))
        #expect(world.ended == true && world.delivered == [1])
    }

    @Test func aMultiSessionWithPipelineDeliversEachMessageInOrderOnItsOwnAck() {
        var world = SenderWorld(.init(secure: true, indications: false, followers: 2))
        Self.runHealthy(&world)
        #expect(world.delivered == [1, 2, 3], "\(world.trace.suffix(12))")
        #expect(world.machine.secureSession?.state == .acknowledged)
        // The stream closed (CLOSE, EOM): the central has its unsubscribe bound.
        #expect(world.received.last == WireFormat.endOfMessage)
        #expect(world.machine.offerTaken == nil)
        _ = world.take(.raw(.hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil)))
        #expect(world.ended == true && world.machine.runningTimers.isEmpty)
    }

    @Test func aCentralThatNeverConfirmsHandshakeMessage1IsDroppedAtTheHandshakesBound() {
        var world = SenderWorld(.init(secure: true, indications: true, followers: 0))
        #expect(world.machine.armed[.handshake] != nil, "bounded from the start")
        _ = world.take(.linkTakes)   // message 1 reaches the central, which never confirms it
        let fired = world.take(.fire(.handshake))
        let reasons = Self.dropped(in: fired?.actions ?? [])
        #expect(reasons == ["it did not confirm the indication carrying the handshake's first message within 10 s; nothing was sent after it"])
        #expect(fired?.actions.contains(.disconnect) == true)
        #expect(fired?.actions.contains(.end(announce: true)) == true)
        #expect(world.delivered.isEmpty && world.machine.runningTimers.isEmpty)
    }

    @Test func aCentralThatNeverAnswersHandshakeMessage1IsDroppedAtTheHandshakesBound() {
        var world = SenderWorld(.init(secure: true, indications: false, followers: 0))
        _ = world.take(.linkTakes)
        let reasons = Self.dropped(in: world.take(.fire(.handshake))?.actions ?? [])
        #expect(reasons == ["no answer to the handshake within 10 s; nothing was sent after the handshake's first message"])
    }

    @Test func theHandshakesBoundEndsOnceTheCentralIsAuthenticated() {
        var world = SenderWorld(.init(secure: true, indications: false, followers: 0))
        _ = world.take(.linkTakes)
        let answer = world.take(.centralWrites)
        #expect(answer?.actions.contains { if case .cancelTimer(let timer) = $0 { timer.kind == .handshake } else { false } } == true)
        #expect(world.take(.fire(.handshake)) == nil, "nothing armed to fire")
    }

    @Test func aCentralRefusedAtTheStartGetsOneLine() {
        let offer = SenderConnection.Offer(SenderWorld.message(0, length: 10), sequence: 1)
        let link = SenderConnection.Link(valueLength: 20, overChannel: false, indications: false)
        func start(_ hello: SenderConnection.CentralHello, requiresSecure: Bool = false) -> String? {
            let keys = SenderConnection.Keys(identity: SenderWorld.senderIdentity, authorizedPeers: .anyKey,
                                             requiresSecure: requiresSecure)
            if case .refused(let reason) = SenderConnection.start(peer: SenderWorld.peer, offer: offer, hello: hello, link: link,
                                                                  keys: keys, settings: SenderWorld.settings, reorderRisk: nil) {
                return reason
            }
            return nil
        }
        #expect(start(.retired) == SenderConnection.version1Refusal)
        #expect(start(.version2(HelloV2(session: 1, offered: [.multi])))?.contains("without encryption") == true)
        #expect(start(.none, requiresSecure: true)?.contains("serves authorized peers only") == true)
        #expect(start(.none) == nil)
    }

    /// A payload in a file is not read by the machine: it asks the shell for windows of it, one
    /// at a time, and the values go on once they came (no filesystem here: the file is a handle
    /// the test answers for).
    @Test(arguments: [false, true])
    func aPayloadInAFileIsAskedForAWindowAtATime(secure: Bool) {
        let bytes = (0..<150_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let body = MessagePayload(file: PayloadFile(descriptor: -1, path: "a file the test answers for"), count: bytes.count)
        let offer = SenderConnection.Offer(OutgoingMessage(body: body, digest: sha256(bytes)), sequence: 1)
        let started = SenderConnection.start(
            peer: SenderWorld.peer, offer: offer, hello: secure ? .version2(SenderWorld.hello) : .none,
            link: .init(valueLength: 182, overChannel: false, indications: false),
            keys: .init(identity: SenderWorld.senderIdentity, authorizedPeers: .anyKey, requiresSecure: false),
            settings: SenderWorld.settings, reorderRisk: nil)
        guard case .started(var machine, var actions) = started else {
            Issue.record("not started")
            return
        }
        var central = SecureReceiverSession(identity: SenderWorld.centralIdentity, authorizedPeers: .anyKey,
                                            hello: SenderWorld.hello, maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        var received: [UInt8] = []
        var reads: [Range<Int>] = []
        var now = Duration.zero
        for _ in 0..<20_000 {
            guard let action = actions.first else { break }
            actions.removeFirst()
            now += .milliseconds(1)
            switch action {
            case .readPayload(let payload, let range):
                #expect(payload == body && !reads.contains(range))
                #expect(!actions.contains { if case .readPayload = $0 { true } else { false } }, "one read at a time")
                reads.append(range)
                actions += machine.handle(.payloadRead(offset: range.lowerBound, bytes: Array(bytes[range])), at: now)
            case .send(let value):
                if secure {
                    for event in (try? central.receiveNotification(value)) ?? [] {
                        switch event {
                        case .write(let write), .progressWrite(let write): actions += machine.handle(.written(write), at: now)
                        case .appended(_, let piece): received += piece
                        default: break
                        }
                    }
                } else if value != WireFormat.endOfMessage {
                    received += value
                }
                actions += machine.handle(.sent, at: now)
            default:
                break
            }
        }
        #expect(received == bytes)
        #expect(reads.count >= 3 && reads.allSatisfy { $0.count <= PayloadWindow.length })
    }

    @Test func aFileThatCannotBeReadEndsTheTransferWithoutItsEnd() {
        let body = MessagePayload(file: PayloadFile(descriptor: -1, path: "gone"), count: 10_000)
        let offer = SenderConnection.Offer(OutgoingMessage(body: body, digest: sha256([])), sequence: 1)
        guard case .started(var machine, let actions) = SenderConnection.start(
            peer: SenderWorld.peer, offer: offer, hello: .none, link: .init(valueLength: 182, overChannel: false, indications: false),
            keys: .init(identity: SenderWorld.senderIdentity, authorizedPeers: .anyKey, requiresSecure: false),
            settings: SenderWorld.settings, reorderRisk: nil) else { return }
        #expect(actions.contains(.readPayload(body, 0..<10_000)))
        let failed = machine.handle(.payloadUnreadable("cannot read 'gone': no such file or directory"), at: .seconds(1))
        #expect(failed.contains(.report(.aborted("sending failed: cannot read 'gone': no such file or directory"))))
        #expect(failed.contains(.end(announce: true)) && !failed.contains { if case .send = $0 { true } else { false } })
    }

    @Test(arguments: setups)
    func aShutDownAbortsWhatWasNotDeliveredAndEndsSilently(setup: SenderWorld.Setup) {
        var world = SenderWorld(setup)
        _ = world.take(.linkTakes)
        let actions = world.take(.raw(.shutDown(reason: "off")))?.actions ?? []
        #expect(actions.contains(.report(.aborted("off"))))
        #expect(actions.last == .end(announce: false))
        #expect(world.machine.runningTimers.isEmpty)
        #expect(world.take(.raw(.shutDown(reason: "off")))?.actions == [])
    }

    // MARK: Every step in every reachable state

    /// The states a healthy run passes through (to the delivery of every message), from which
    /// the exploration tries every step.
    static func healthyPath(_ setup: SenderWorld.Setup) -> [SenderWorld] {
        var world = SenderWorld(setup)
        var path = [world]
        var progressed = true
        while progressed, !world.machine.isOver {
            progressed = false
            for step: Step in [.linkTakes, .confirm, .centralWrites, .answer(serve: true), .raw(.drained)] {
                if step == .confirm, world.machine.unconfirmed == 0 { continue }
                if step == .raw(.drained), !world.draining { continue }
                if world.take(step) != nil {
                    progressed = true
                    path.append(world)
                }
            }
        }
        if !setup.secure {
            for step: Step in [.raw(.hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil)),
                               .fire(.delivery(.compatConfirmation))] where world.take(step) != nil {
                path.append(world)
            }
        }
        return path
    }

    @Test(arguments: setups)
    func everyStepInEveryReachableStateKeepsTheRules(setup: SenderWorld.Setup) {
        // Every state within `depth` steps of the healthy path, each tried with every step.
        let depth = setup.followers > 0 ? 2 : 3
        var seen: Set<String> = []
        var frontier = Self.healthyPath(setup).map { (world: $0, depth: 0) }
        for entry in frontier { seen.insert(entry.world.fingerprint) }
        var delivered = 0, aborted = 0, over = 0, tried = 0
        while let (world, reached) = frontier.popLast() {
            for step in world.possibleSteps {
                var next = world
                guard let (input, actions) = next.take(step) else { continue }
                tried += 1
                Self.check(before: world, step: step, input: input, actions: actions, after: next)
                if actions.contains(where: { if case .deliver = $0 { true } else { false } }) { delivered += 1 }
                if actions.contains(where: { if case .report(.aborted) = $0 { true } else { false } }) { aborted += 1 }
                if next.machine.isOver { over += 1 }
                if reached + 1 < depth, seen.insert(next.fingerprint).inserted { frontier.append((next, reached + 1)) }
            }
        }
        #expect(tried > 200, "the exploration tries enough steps: \(tried)")
        #expect(delivered > 0 && aborted > 0 && over > 0, "delivered \(delivered), aborted \(aborted), over \(over)")
    }

    /// The rules one step must keep, whatever came before.
    static func check(before: SenderWorld, step: Step, input: SenderConnection.Input, actions: [Action],
                      after: SenderWorld, sourceLocation: SourceLocation = #_sourceLocation) {
        func context() -> Comment { "\(step) → \(actions) after \(before.trace.suffix(8))" }
        if before.machine.isOver {
            #expect(actions.isEmpty, context(), sourceLocation: sourceLocation)
            return
        }
        for case .deliver(let offer, let summary, _) in actions {
            #expect(!before.delivered.contains(offer.sequence), "delivered twice: \(context())", sourceLocation: sourceLocation)
            #expect(summary.sequence == offer.sequence, context(), sourceLocation: sourceLocation)
            if after.machine.format == .secure {
                #expect(after.acknowledgementsFed.contains(offer.message.digest), "before its ACK: \(context())",
                        sourceLocation: sourceLocation)
            } else {
                guard case .bluetoothChecked(true, _) = input else {
                    Issue.record("compat counted without Bluetooth seen up: \(context())", sourceLocation: sourceLocation)
                    continue
                }
                #expect(after.machine.delivery.endOfMessageWritten && after.machine.delivery.hasHungUp, context(),
                        sourceLocation: sourceLocation)
            }
        }
        // The end comes once, last (a drop's disconnect aside), and leaves nothing running.
        let ends = actions.indices.filter { if case .end = actions[$0] { true } else { false } }
        #expect(ends.count == (after.machine.isOver ? 1 : 0), context(), sourceLocation: sourceLocation)
        if let end = ends.first {
            #expect(actions[(end + 1)...].allSatisfy { $0 == .disconnect }, context(), sourceLocation: sourceLocation)
            #expect(after.machine.runningTimers.isEmpty, "a timer left running: \(context())", sourceLocation: sourceLocation)
        }
        // An abort ends the connection in the same step: nothing happens after it.
        if actions.contains(where: { if case .report(.aborted) = $0 { true } else { false } }) {
            #expect(!ends.isEmpty, "aborted without ending: \(context())", sourceLocation: sourceLocation)
        }
        // The timers started and cancelled are exactly the change in the running ones.
        var running = before.machine.runningTimers
        if case .timerFired(let timer) = input { running.remove(timer) }
        for action in actions {
            switch action {
            case .startTimer(let timer, _):
                #expect(running.insert(timer).inserted, "started twice: \(context())", sourceLocation: sourceLocation)
            case .cancelTimer(let timer):
                #expect(running.remove(timer) != nil, "cancelled idle: \(context())", sourceLocation: sourceLocation)
            default:
                break
            }
        }
        #expect(running == after.machine.runningTimers, context(), sourceLocation: sourceLocation)
        if case .timerFired(let timer) = input, !before.machine.runningTimers.contains(timer) {
            #expect(actions.isEmpty, "a stale timer acted: \(context())", sourceLocation: sourceLocation)
        }
        // One value with the link at a time; with indications, one unconfirmed at most.
        let sends = actions.filter { if case .send = $0 { true } else { false } }.count
        #expect(sends <= 1, context(), sourceLocation: sourceLocation)
        if sends == 1 {
            #expect(before.inFlight == nil || step == .linkTakes || step == .linkLoses || input == .sent
                    || { if case .sendFailed = input { true } else { false } }(), context(), sourceLocation: sourceLocation)
        }
        if after.machine.confirmsIndications {
            #expect(after.machine.unconfirmed <= 1, context(), sourceLocation: sourceLocation)
        }
    }

    // MARK: Random sequences

    @Test(arguments: setups)
    func randomSequencesKeepTheRulesAndEndWithEveryTimerResolved(setup: SenderWorld.Setup) {
        var delivered = 0, aborted = 0
        for seed in UInt64(1)...200 {
            var random = SeededGenerator(seed: seed)
            var world = SenderWorld(setup)
            var healthy: [Step] = [.linkTakes, .linkTakes, .linkTakes, .confirm, .centralWrites, .centralWrites,
                                   .answer(serve: true), .raw(.drained)]
            if !setup.secure {
                // Apple's central leaves after EOM, and Bluetooth is read a moment later.
                healthy += [.raw(.hungUp(reason: "the central unsubscribed", drainedWhenClosed: nil)),
                            .fire(.delivery(.compatConfirmation)), .raw(.bluetoothChecked(up: true, reorderRisk: nil))]
            }
            for _ in 0..<Int.random(in: 1...60, using: &random) where !world.machine.isOver {
                let step: Step = Int.random(in: 0..<6, using: &random) == 0
                    ? world.possibleSteps.randomElement(using: &random)!
                    : healthy.randomElement(using: &random)!
                let before = world
                guard let (input, actions) = world.take(step) else { continue }
                Self.check(before: before, step: step, input: input, actions: actions, after: world)
                if actions.contains(where: { if case .report(.aborted) = $0 { true } else { false } }) { aborted += 1 }
            }
            let before = world
            if let (input, actions) = world.take(.raw(.shutDown(reason: "done"))) {
                Self.check(before: before, step: .raw(.shutDown(reason: "done")), input: input, actions: actions, after: world)
            }
            #expect(world.machine.isOver && world.machine.runningTimers.isEmpty, "seed \(seed): \(world.trace.suffix(8))")
            #expect(Set(world.delivered).count == world.delivered.count, "seed \(seed)")
            delivered += world.delivered.count
        }
        #expect(delivered > 5 && aborted > 5, "delivered \(delivered), aborted \(aborted)")
    }
}

extension SenderConnection {
    var runningTimers: Set<TimerID> {
        Set(armed.map { TimerID(kind: $0.key, generation: $0.value) })
    }
}
