import Testing
@testable import Transfer
import TestSupport

/// Apple's flow on the receiving side: values until `EOM`, bounded by the limit, every failure
/// terminal and said in one line.
@Suite struct MessageReceiverTests {
    func firstError(_ values: [[UInt8]], receiver: inout MessageReceiver) -> ReceiveError? {
        for value in values {
            do { _ = try receiver.receive(value) } catch { return error }
        }
        return nil
    }

    @Test func progressReportsTheBytesSoFar() throws {
        var receiver = MessageReceiver()
        #expect(try receiver.receive([1, 2, 3]) == .progress(TransferProgress(bytesSoFar: 3, totalBytes: nil)))
        #expect(try receiver.receive([4]) == .progress(TransferProgress(bytesSoFar: 4, totalBytes: nil)))
        #expect(try receiver.receive(WireFormat.endOfMessage) == .complete(ReceivedMessage(payload: [1, 2, 3, 4], format: .compat)))
        #expect(receiver.valuesReceived == 3)
    }

    @Test func anOversizeStreamIsRefusedAsSoonAsItPassesTheLimit() {
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: 50))
        let values = Array(repeating: [UInt8](repeating: 0x61, count: 20), count: 10)
        #expect(firstError(values, receiver: &receiver) == .compatMessageTooLarge(limit: 50))
        #expect(receiver.valuesReceived == 3)
    }

    @Test func aMessageExactlyAtTheLimitIsAccepted() throws {
        let payload = [UInt8](repeating: 0x62, count: 50)
        let values = allValues(MessageSender(payload: payload, maximumValueLength: 20))
        #expect(try reassemble(values, limits: TransferLimits(maximumMessageSize: 50))?.payload == payload)
    }

    @Test func aValueAfterEOMIsRefused() {
        var receiver = MessageReceiver()
        #expect(firstError([[1], WireFormat.endOfMessage, [2]], receiver: &receiver) == .valueAfterEndOfMessage)
    }

    @Test func failureIsTerminal() {
        var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: 1))
        #expect(firstError([[1, 2]], receiver: &receiver) == .compatMessageTooLarge(limit: 1))
        // A later EOM does not turn the refused stream into a message.
        #expect(firstError([WireFormat.endOfMessage], receiver: &receiver) == .compatMessageTooLarge(limit: 1))
        #expect(receiver.finishWithoutEOM() == .compatMessageTooLarge(limit: 1))
        #expect(!receiver.isComplete)
    }

    @Test func finishWithoutEOMReportsWhatWasMissing() throws {
        var nothing = MessageReceiver()
        #expect(nothing.finishWithoutEOM() == .missingEndOfMessage(received: 0))
        var some = MessageReceiver()
        _ = try some.receive([1, 2, 3, 4])
        #expect(some.finishWithoutEOM() == .missingEndOfMessage(received: 4))
        #expect(firstError([WireFormat.endOfMessage], receiver: &some) == .missingEndOfMessage(received: 4))
        var done = MessageReceiver()
        _ = try done.receive(WireFormat.endOfMessage)
        #expect(done.isComplete && done.finishWithoutEOM() == nil)
    }

    @Test func emptyValuesAreHarmless() throws {
        #expect(try reassemble([[], [1], [], WireFormat.endOfMessage])?.payload == [1])
    }

    @Test func errorsHaveOneLineDescriptions() {
        let errors: [ReceiveError] = [
            .announcedLengthExceedsLimit(announced: 5, limit: 4), .missingEndOfMessage(received: 1),
            .compatMessageTooLarge(limit: 9), .valueAfterEndOfMessage, .missingStartOfMessage(valuesReceived: 4),
        ]
        for error in errors {
            #expect(!error.description.isEmpty && !error.description.contains("\n"))
        }
        #expect(Set(errors.map(\.description)).count == errors.count)
    }
}
