import Crypto
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import TestSupport
import Transfer
import Trust

/// How the central's reassembly reads a hang-up in a session that carries several messages:
/// after every begun message was stored and acknowledged it is the session's end; in the
/// middle of a message it is a failure (nothing of that message kept, the visit retried).
@Suite struct SessionEndAssemblyTests {
    /// A keyless multi session whose first message is delivered to the assembly, stored and
    /// acknowledged; returns the sender (to send on) and the assembly.
    private func afterOneMessage() throws -> (SecureSenderSession, MessageAssembly) {
        let hello = HelloV2(session: 9, offered: [.secure, .meta, .multi])
        let payload = randomBytes(3000, seed: 5)
        var sender = try SecureSenderSession(
            identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello, payload: payload,
            digest: Array(SHA256.hash(data: payload)), metadata: nil, maximumValueLength: 244, wantsMulti: true)
        let receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 244)
        var assembly = MessageAssembly(limits: .default,
                                       idleTimeout: .seconds(60), secure: receiver)
        var time = Duration.zero
        var kept: [UInt8] = []
        while let value = sender.nextValue() {
            time += .milliseconds(1)
            let step = assembly.handle(.value(value), at: time)
            for case .write(_, let bytes) in assembly.takePayloadWork() { kept += bytes }
            for write in assembly.takeWrites() { _ = try sender.receiveWrite(write.value) }
            if case .complete(let message, _) = step {
                #expect(kept == payload && message.byteCount == payload.count)
                for write in try assembly.secureAcknowledgement(alreadyStored: false) {
                    let events = try sender.receiveWrite(write)
                    #expect(events.contains(.acknowledged(alreadyStored: false)))
                }
                return (sender, assembly)
            }
            if case .failed(let failure) = step { Issue.record("failed: \(failure)") }
        }
        throw SessionEndTestError.incomplete
    }

    enum SessionEndTestError: Error { case incomplete }

    @Test func aHangUpAfterTheLastAcknowledgedMessageEndsTheSession() throws {
        var (_, assembly) = try afterOneMessage()
        let step = assembly.handle(.ended("the peripheral closed the L2CAP channel"), at: .seconds(1))
        #expect(step == .sessionEnded, "nothing was under way: the session ended, it did not fail")
    }

    @Test func aHangUpInTheMiddleOfTheNextMessageIsAFailure() throws {
        var (sender, assembly) = try afterOneMessage()
        let next = randomBytes(5000, seed: 6)
        try sender.sendNext(payload: next, digest: Array(SHA256.hash(data: next)), metadata: nil)
        // The HEADER and some DATA of the next message arrive, then the link goes.
        for _ in 0..<4 {
            guard let value = sender.nextValue() else { break }
            _ = assembly.handle(.value(value), at: .seconds(1))
        }
        let step = assembly.handle(.ended("the peripheral closed the L2CAP channel"), at: .seconds(2))
        guard case .failed(let failure) = step else {
            Issue.record("a cut message must fail, got \(step)")
            return
        }
        #expect(failure.description.contains("closed the L2CAP channel"))
    }
}
