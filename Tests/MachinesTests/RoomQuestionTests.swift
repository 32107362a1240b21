@testable import Machines
import Testing
import TestSupport
import Transfer
import Trust

/// What the visit asks the shell about room while a secure message arrives (issue 48, L-3):
/// once with the length the HEADER announces, then the reserve again after every value, not
/// once per message; a refusal at any of them ends the visit, nothing stored.
@Suite struct RoomQuestionTests {
    /// Runs a 5000-byte secure message through a visit, answering each room question with
    /// `answer`; returns the questions asked, what was stored, and how the visit ended.
    static func run(answer: (RoomQuestion, Int) -> ReceiverVisit.RoomRefusal?) throws
        -> (questions: [RoomQuestion], stored: Bool, finished: ReceiverVisit.Action?) {
        let hello = HelloV2(session: 9, offered: [.secure])
        let payload = (0..<5000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var sender = try SecureSenderSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello, payload: payload,
                                             digest: sha256(payload), metadata: nil, maximumValueLength: 244)
        let session = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                            maximumPayloadLength: 1 << 20, maximumWriteLength: 244)
        var visit = ReceiverVisit(
            facts: .init(peer: ReceiverWorld.peer, overChannel: false, offeredAsCommand: false, commandAllowed: true,
                         messageCount: nil, receivedBefore: 0),
            assembly: MessageAssembly(limits: .default, idleTimeout: .seconds(5), secure: session),
            remembered: [])
        var questions: [RoomQuestion] = []
        var stored = false
        var finished: ReceiverVisit.Action?
        var now = Duration.zero
        func perform(_ actions: [ReceiverVisit.Action]) throws -> [ReceiverVisit.Input] {
            var answers: [ReceiverVisit.Input] = []
            for action in actions {
                switch action {
                case .write(let value, _): _ = try sender.receiveWrite(value)
                case .checkRoom(let question):
                    questions.append(question)
                    answers.append(.room(answer(question, questions.count)))
                case .store:
                    stored = true
                    answers.append(.stored(.stored(sequence: 1, at: nil)))
                case .writeAcknowledgement(let values, _, _):
                    for value in values { _ = try sender.receiveWrite(value) }
                    answers.append(.acknowledgementWritten(failure: nil))
                case .finish: finished = action
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
        return (questions, stored, finished)
    }

    @Test func theAnnouncementIsAskedOnceThenTheReserveBeforeEveryWrite() throws {
        let run = try Self.run { _, _ in nil }
        #expect(run.stored)
        // Before the HEADER (the handshake's values) nothing is announced yet: what has come
        // is asked about, as for a message without a length.
        let announcement = try #require(run.questions.firstIndex(of: .announced(5000)))
        #expect(run.questions[..<announcement].allSatisfy { if case .received = $0 { true } else { false } })
        #expect(run.questions.filter { $0 == .announced(5000) }.count == 1)
        let writes = run.questions[(announcement + 1)...]
        #expect(writes.count >= 5000 / 244)
        #expect(writes.allSatisfy { if case .writing(5000, _) = $0 { true } else { false } })
        // What has come grows with each question.
        let received = writes.compactMap { if case .writing(_, let got) = $0 { got } else { nil } }
        #expect(received == received.sorted())
    }

    @Test func aDiskThatFillsMidwayRefusesTheMessageAtTheNextWrite() throws {
        var writes = 0
        let run = try Self.run { question, _ in
            guard case .writing = question else { return nil }
            writes += 1
            return writes == 3 ? ReceiverVisit.RoomRefusal(bound: "reserve", reason: "the disk filled") : nil
        }
        #expect(!run.stored)
        #expect(writes == 3)
        #expect(run.finished == .finish(failure: .refused(bound: "reserve", reason: "the disk filled")))
    }
}
