@testable import Machines
import Testing
import TestSupport
import Transfer
import Trust

/// The central's visit machine without a bus or a file: named paths with what they must do,
/// every step in every state near a healthy visit, and seeded random sequences, checked against
/// the rules (a message is stored at most once, and never one stored already; its ACK is written
/// only once it is stored; what is stored is what the sender sent, in order; nothing happens
/// after the end; every answer asked for is the last thing a step asks).
@Suite struct ReceiverVisitTests {
    typealias Action = ReceiverVisit.Action
    typealias Step = ReceiverWorld.Step

    static let setups: [ReceiverWorld.Setup] = [
        .init(secure: false, messages: 1),
        .init(secure: true, messages: 1),
        .init(secure: true, messages: 1, rememberedFirst: true),
        .init(secure: true, messages: 3),
    ]

    /// Runs the world as a healthy sender, sink and link would until the visit ends.
    @discardableResult
    static func runHealthy(_ world: inout ReceiverWorld, limit: Int = 400) -> [Action] {
        var all: [Action] = []
        for _ in 0..<limit where !world.visit.isOver {
            guard let step = world.healthyStep, let (_, actions) = world.take(step) else {
                if world.take(.ended) != nil { continue }
                break
            }
            all += actions
        }
        return all
    }

    // MARK: Named paths

    @Test func aCompatMessageIsStoredOnceAndReceivedWithoutAnAck() {
        var world = ReceiverWorld(.init(secure: false, messages: 1))
        let actions = Self.runHealthy(&world)
        #expect(world.stored == [ReceiverWorld.payload(0)])
        #expect(!actions.contains { if case .writeAcknowledgement = $0 { true } else { false } })
        #expect(actions.contains { if case .report(.received(let summary, "/in/1")) = $0 { summary.format == .compat } else { false } })
        #expect(world.finished == .some(nil))
    }

    @Test func aSecureMessageIsAcknowledgedOnlyOnceStored() {
        var world = ReceiverWorld(.init(secure: true, messages: 1))
        while world.pendingStore == nil, !world.visit.isOver {
            guard let step = world.healthyStep, world.take(step) != nil else { break }
        }
        #expect(world.pendingStore?.payload == ReceiverWorld.payload(0))
        #expect(world.acknowledgedAtSender == 0 && world.pendingAcknowledgement == nil, "nothing acknowledged before it is stored")
        let stored = world.take(.stored)
        #expect(stored?.actions.contains { if case .writeAcknowledgement(_, false, false) = $0 { true } else { false } } == true)
        _ = world.take(.acknowledgementWritten)
        #expect(world.acknowledgedAtSender == 1)
        Self.runHealthy(&world)
        #expect(world.stored == [ReceiverWorld.payload(0)] && world.finished == .some(nil))
    }

    @Test func aMessageStoredInAnEarlierVisitIsAcknowledgedNotStoredAgain() {
        var world = ReceiverWorld(.init(secure: true, messages: 1, rememberedFirst: true))
        let actions = Self.runHealthy(&world)
        #expect(world.stored.isEmpty)
        #expect(world.acknowledgedAtSender == 1)
        #expect(actions.contains { if case .report(.warning(let text)) = $0 { text.contains("not stored twice") } else { false } })
        #expect(world.visit.remembered.isEmpty, "the sender moved on: nothing left to recognise")
    }

    @Test func aMultiSessionStoresEachMessageInOrderAndRemembersTheLastUnconfirmedAck() {
        var world = ReceiverWorld(.init(secure: true, messages: 3))
        Self.runHealthy(&world)
        #expect(world.stored == (0..<3).map(ReceiverWorld.payload))
        #expect(world.acknowledgedAtSender == 3)
        #expect(world.finished == .some(nil))
    }

    @Test func aRefusedStoreEndsTheVisitWithoutAnAck() {
        var world = ReceiverWorld(.init(secure: true, messages: 1))
        while world.pendingStore == nil, let step = world.healthyStep, world.take(step) != nil {}
        let refused = world.take(.storeRefused)
        #expect(refused?.actions == [.finish(failure: .refused(bound: "storage", reason: "the message could not be stored (no room)"))])
        #expect(world.acknowledgedAtSender == 0)
    }

    @Test func aFailedAckWriteRemembersTheMessageAsStored() {
        var world = ReceiverWorld(.init(secure: true, messages: 1))
        while world.pendingAcknowledgement == nil, let step = world.healthyStep, world.take(step) != nil {}
        let failed = world.take(.acknowledgementFailed)
        #expect(failed?.actions.contains { if case .report(.warning(let text)) = $0 { text.contains("could not acknowledge") } else { false } } == true)
        #expect(world.visit.rememberedNow.map(\.digest) == [OutgoingMessage(payload: ReceiverWorld.payload(0)).digest])
    }

    @Test func aDiskWithoutRoomRefusesTheMessageBeforeItIsStored() {
        var world = ReceiverWorld(.init(secure: true, messages: 1))
        while !world.pendingRoom, let step = world.healthyStep, world.take(step) != nil {}
        let refused = world.take(.roomRefused)
        #expect(refused?.actions == [.finish(failure: .refused(bound: "reserve", reason: "the disk is full"))])
        #expect(world.stored.isEmpty)
    }

    @Test func aStalledSenderFailsTheVisitAtTheIdleTimeout() {
        var world = ReceiverWorld(.init(secure: true, messages: 1))
        for _ in 0..<10 where !world.visit.isOver { _ = world.take(.tick) }
        guard case .some(.some(.transient(let reason))) = world.finished else {
            Issue.record("expected a transient failure, got \(String(describing: world.finished))")
            return
        }
        #expect(reason.contains("stalled"))
    }

    /// Resume: the visit asks the shell for a checkpoint at the HEADER, and once told it holds
    /// one (its bytes put first), the session writes RESUME and what is kept from then on
    /// continues at the held offset; the stored message is the sender's.
    @Test func aCheckpointTheShellHoldsIsResumedFrom() throws {
        let hello = HelloV2(session: 3, offered: [.secure, .resume])
        let payload = (0..<20_000).map { UInt8(truncatingIfNeeded: $0 &* 11) }
        var sender = try SecureSenderSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello, payload: payload,
                                             digest: sha256(payload), metadata: nil, maximumValueLength: 182)
        let session = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                            maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        var visit = ReceiverVisit(
            facts: .init(peer: ReceiverWorld.peer, overChannel: false, offeredAsCommand: false, commandAllowed: true,
                         messageCount: nil, receivedBefore: 0),
            assembly: MessageAssembly(limits: .default, idleTimeout: .seconds(5), secure: session, keepsCheckpoints: true),
            remembered: [])
        var kept: [UInt8] = []
        var lookedUp = 0
        var resumedAt: Int?
        var stored: [UInt8]?
        var now = Duration.zero
        func perform(_ actions: [Action]) throws -> [ReceiverVisit.Input] {
            var answers: [ReceiverVisit.Input] = []
            for action in actions {
                switch action {
                case .write(let value, _):
                    for case .resumed(let offset) in try sender.receiveWrite(value) { resumedAt = Int(offset) }
                case .keepPayload(.begin): kept = []
                case .keepPayload(.write(let offset, let bytes)):
                    #expect(offset == kept.count, "continues what is kept")
                    kept += bytes
                case .lookUpCheckpoint:
                    lookedUp += 1
                    kept = Array(payload[..<8_000])
                    var digest = RunningDigest()
                    digest.update(kept)
                    answers.append(.checkpointHeld(bytes: kept.count, digest: digest))
                case .checkRoom: answers.append(.room(nil))
                case .store: stored = kept; answers.append(.stored(.stored(sequence: 1, at: nil)))
                case .writeAcknowledgement(let values, _, _):
                    for value in values { _ = try sender.receiveWrite(value) }
                    answers.append(.acknowledgementWritten(failure: nil))
                default: break
                }
            }
            return answers
        }
        while !visit.isOver, let value = sender.nextValue() {
            now += .milliseconds(5)
            var answers = try perform(visit.handle(.transfer(.value(value)), at: now))
            while !answers.isEmpty { answers = try perform(visit.handle(answers.removeFirst(), at: now)) }
        }
        #expect(lookedUp == 1)
        #expect(resumedAt == 8_000)
        #expect(stored == payload)
        #expect(sender.payloadBytesNotified < payload.count - 8_000 + 2 * 4096, "the sender skipped what was held")
    }

    // MARK: Every step in every state near a healthy visit

    static func healthyPath(_ setup: ReceiverWorld.Setup) -> [ReceiverWorld] {
        var world = ReceiverWorld(setup)
        var path = [world]
        for _ in 0..<400 where !world.visit.isOver {
            guard let step = world.healthyStep, world.take(step) != nil else { break }
            path.append(world)
        }
        return path
    }

    @Test(arguments: setups)
    func everyStepInEveryReachableStateKeepsTheRules(setup: ReceiverWorld.Setup) {
        let depth = setup.messages > 1 ? 2 : 3
        var seen: Set<String> = []
        var frontier = Self.healthyPath(setup).map { (world: $0, depth: 0) }
        for entry in frontier { seen.insert(entry.world.fingerprint) }
        var tried = 0, stores = 0, finishes = 0
        while let (world, reached) = frontier.popLast() {
            for step in world.possibleSteps {
                var next = world
                guard let (input, actions) = next.take(step) else { continue }
                tried += 1
                Self.check(before: world, step: step, input: input, actions: actions, after: next)
                if actions.contains(where: { if case .store = $0 { true } else { false } }) { stores += 1 }
                if next.visit.isOver { finishes += 1 }
                if reached + 1 < depth, seen.insert(next.fingerprint).inserted { frontier.append((next, reached + 1)) }
            }
        }
        #expect(tried > 200 && finishes > 0, "tried \(tried), finished \(finishes)")
        #expect(setup.rememberedFirst || stores > 0, "stores \(stores)")
    }

    /// The rules one step must keep, whatever came before.
    static func check(before: ReceiverWorld, step: Step, input: ReceiverVisit.Input, actions: [Action],
                      after: ReceiverWorld, sourceLocation: SourceLocation = #_sourceLocation) {
        func context() -> Comment { "\(step) → \(actions) after \(before.trace.suffix(8))" }
        if before.visit.isOver {
            #expect(actions.isEmpty, context(), sourceLocation: sourceLocation)
            return
        }
        for case .store(var message, _) in actions {
            // A secure message's bytes are the ones kept as they came (the shell's).
            if message.format == .secure { message.body = MessagePayload(after.kept) }
            // Stored at most once, never one stored before, and what the sender sent, in order.
            #expect(!before.stored.contains(message.payload), "stored twice: \(context())", sourceLocation: sourceLocation)
            #expect(!before.visit.remembered.contains { $0.digest == message.digest }, "stored again: \(context())",
                    sourceLocation: sourceLocation)
            if message.format == .compat {
                #expect(message.payload == after.compatPayloadFed, "not what the peer sent: \(context())", sourceLocation: sourceLocation)
            } else {
                let index = after.payloads.firstIndex(of: message.payload)
                #expect((index ?? -1) >= before.stored.count, "not the sender's, in order: \(context())",
                        sourceLocation: sourceLocation)
            }
        }
        // Every byte kept for storing is the sender's, at its offset, in order.
        var keptCount = before.kept.count
        for case .keepPayload(let work) in actions {
            switch work {
            case .begin:
                keptCount = 0
            case .write(let offset, let bytes):
                #expect(offset == keptCount, "a gap or a rewrite: \(context())", sourceLocation: sourceLocation)
                if let expected = after.keptFor {
                    #expect(offset + bytes.count <= expected.count && Array(expected[offset..<(offset + bytes.count)]) == bytes,
                            "not the sender's bytes: \(context())", sourceLocation: sourceLocation)
                }
                keptCount = offset + bytes.count
            }
        }
        // The ACK is written once its message is stored (or known stored), never before.
        if actions.contains(where: { if case .writeAcknowledgement = $0 { true } else { false } }) {
            let answersStore = if case .stored(.stored) = input { true } else if case .stored(.storedBefore) = input { true } else { false }
            #expect(answersStore || !before.visit.remembered.isEmpty, "ACK before storing: \(context())",
                    sourceLocation: sourceLocation)
        }
        // What needs an answer is the last thing a step asks, and only one.
        let asks = actions.indices.filter {
            switch actions[$0] {
            case .checkRoom, .store, .writeAcknowledgement, .awaitSenderClose, .lookUpCheckpoint: true
            default: false
            }
        }
        #expect(asks.count <= 1 && asks.allSatisfy { $0 == actions.count - 1 }, "asked twice: \(context())",
                sourceLocation: sourceLocation)
        let finishes = actions.indices.filter { if case .finish = actions[$0] { true } else { false } }
        #expect(finishes.count == (after.visit.isOver ? 1 : 0), context(), sourceLocation: sourceLocation)
        if let finish = finishes.first {
            #expect(finish == actions.count - 1, "acted after the end: \(context())", sourceLocation: sourceLocation)
            #expect(after.visit.pending == nil, context(), sourceLocation: sourceLocation)
        }
    }

    // MARK: Random sequences

    @Test(arguments: setups)
    func randomSequencesKeepTheRulesAndEveryVisitEnds(setup: ReceiverWorld.Setup) {
        var completed = 0, failed = 0
        for seed in UInt64(1)...200 {
            var random = SeededGenerator(seed: seed)
            var world = ReceiverWorld(setup)
            for _ in 0..<Int.random(in: 1...80, using: &random) where !world.visit.isOver {
                let step: Step = Int.random(in: 0..<5, using: &random) == 0 || world.healthyStep == nil
                    ? world.possibleSteps.randomElement(using: &random)!
                    : world.healthyStep!
                let before = world
                guard let (input, actions) = world.take(step) else { continue }
                Self.check(before: before, step: step, input: input, actions: actions, after: world)
            }
            // The link ends, and whatever is asked is answered: the visit ends.
            for _ in 0..<20 where !world.visit.isOver {
                let step = world.healthyStep == .value || world.healthyStep == nil ? .ended : world.healthyStep!
                let before = world
                guard let (input, actions) = world.take(step) else { break }
                Self.check(before: before, step: step, input: input, actions: actions, after: world)
            }
            #expect(world.visit.isOver, "seed \(seed): \(world.trace.suffix(8))")
            #expect(Set(world.stored).count == world.stored.count, "seed \(seed)")
            if setup.secure {
                #expect(world.stored.allSatisfy(world.payloads.contains), "only the sender's messages: seed \(seed)")
                #expect(world.stored == world.stored.sorted { world.payloads.firstIndex(of: $0)! < world.payloads.firstIndex(of: $1)! },
                        "stored in the sender's order: seed \(seed)")
            } else {
                #expect(world.stored.allSatisfy { $0 == world.compatPayloadFed }, "what the peer sent: seed \(seed)")
            }
            if case .some(.none) = world.finished { completed += 1 } else { failed += 1 }
        }
        #expect(completed > 5 && failed > 5, "completed \(completed), failed \(failed)")
    }
}
