import Transfer
import Crypto
import TestSupport
import Testing

@testable import Trust

/// The `window` capability (docs/wire-v2.md, section 4): the receiver reports what it holds of
/// the message under way (PROGRESS) every `FlowWindow.reportInterval` bytes, and the sender
/// runs at most `FlowWindow.bytes` beyond the last report, so what a cut link loses is bounded
/// whatever the queues between the two applications hold. Both modes.
@Suite struct WindowSessionTests {
    typealias Mode = PipelineSessionTests.Mode

    static let offered: Capabilities = [.meta, .multi, .resume, .pipeline, .window]

    static func pair(_ mode: Mode, payload: [UInt8], valueLength: Int = 182, offered: Capabilities = offered,
                     wantsMulti: Bool = false, heldPrefix: HeldPrefix? = nil) throws -> SessionPair {
        try PipelineSessionTests.pair(mode, first: payload, valueLength: valueLength, offered: offered,
                                      wantsMulti: wantsMulti, heldPrefix: heldPrefix)
    }

    /// What a link whose receiver is slower than its sender shows: the most payload bytes the
    /// sender had handed out beyond what the receiver held at any moment.
    struct LaggingLink {
        var completed: [UInt8]?
        var largestLead = 0
        var receiverHeld = 0
        var progressReports: [UInt64] = []
        var receiverError: SecureSessionError?
        var senderError: SecureSessionError?
    }

    /// The sender hands out a value whenever it has one; the receiver reads one queued value
    /// every `receiverEvery` steps (values queue in between, as in bluetoothd's and the
    /// kernel's buffers); the receiver's writes reach the sender at once.
    static func runLagging(_ pair: inout SessionPair, receiverEvery: Int = 3, maximumSteps: Int = 2_000_000) -> LaggingLink {
        var link = LaggingLink()
        var queue: [[UInt8]] = []
        var queueStart = 0
        for step in 0..<maximumSteps {
            var progressed = false
            if let value = pair.sender.nextValue() {
                queue.append(value)
                progressed = true
            }
            link.largestLead = max(link.largestLead, pair.sender.payloadBytesSent - link.receiverHeld)
            guard step % receiverEvery == 0 || !progressed, queueStart < queue.count else {
                if !progressed, queueStart == queue.count { return link }
                continue
            }
            let value = queue[queueStart]
            queueStart += 1
            var writes: [[UInt8]] = []
            do throws(SecureSessionError) {
                for event in try pair.receive(value) {
                    switch event {
                    case .progress(let held): link.receiverHeld = held
                    case .complete(let header):
                        link.completed = pair.kept.completed.last?.bytes
                        link.receiverHeld = Int(header.payloadLength)
                        writes += try pair.receiver.acknowledgement(outcome: 0)
                    case .write(let write): writes.append(write)
                    case .progressWrite(let write): writes.append(write)
                    default: break
                    }
                }
            } catch {
                link.receiverError = error
                return link
            }
            do throws(SecureSessionError) {
                for write in writes { _ = try pair.sender.receiveWrite(write) }
            } catch {
                link.senderError = error
                return link
            }
        }
        Issue.record("the session did not end within \(maximumSteps) steps")
        return link
    }

    // MARK: - Negotiation

    @Test(arguments: Mode.allCases)
    func windowIsChosenWhenOfferedAndAccepted(mode: Mode) throws {
        let payload = testPayload(1000)
        #expect(try Self.pair(mode, payload: payload).sender.chosen.contains(.window))
        #expect(!(try Self.pair(mode, payload: payload, offered: [.meta, .multi]).sender.chosen.contains(.window)))
        let hello = HelloV2(session: 7, offered: [.secure, .window])
        let declining = try SecureSenderSession(
            identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
            payload: payload, digest: Array(SHA256.hash(data: payload)), metadata: nil,
            maximumValueLength: 182, acceptsWindow: false)
        #expect(!declining.chosen.contains(.window))
        #expect(Capabilities.known.contains(.window) && Capabilities.window.rawValue == 1 << 5)
        #expect(FlowWindow.reportInterval <= FlowWindow.bytes - RecordMessage.dataBytesPerRecord)
    }

    @Test func progressRecordsHaveTheDesignedLayout() throws {
        let record = RecordMessage.progress(message: 0x0102_0304, held: 0x0A0B_0C0D_0E0F_1011).record
        #expect(record.kind.rawValue == 0x07)
        #expect(record.content == [1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F, 0x10, 0x11])
        #expect(try RecordMessage(parsing: record) == .progress(message: 0x0102_0304, held: 0x0A0B_0C0D_0E0F_1011))
        #expect(throws: RecordContentError.truncated(kind: .progress)) {
            try RecordMessage(parsing: Record(kind: .progress, content: [1, 2, 3, 4, 5]))
        }
    }

    // MARK: - The sender stays within the window

    @Test(arguments: Mode.allCases, [20, 182, 509])
    func withoutReportsTheSenderStopsAtTheWindowAndFlushes(mode: Mode, valueLength: Int) throws {
        let payload = testPayload(300_000, seed: 9)
        var pair = try Self.pair(mode, payload: payload, valueLength: valueLength)
        var notified: [[UInt8]] = []
        var writes: [[UInt8]] = []
        // The secure handshake needs the central's message 2; nothing else goes back.
        while true {
            var batch: [[UInt8]] = []
            while let value = pair.sender.nextValue() { batch.append(value) }
            guard !batch.isEmpty else { break }
            notified += batch
            for value in batch {
                for event in try pair.receive(value) {
                    if case .write(let write) = event { writes.append(write) }
                    if case .progressWrite(let write) = event { _ = write }
                }
            }
            for write in writes { _ = try pair.sender.receiveWrite(write) }
            writes = []
        }
        #expect(pair.sender.awaitsProgress)
        #expect(pair.sender.payloadBytesSent <= FlowWindow.bytes)
        #expect(pair.sender.payloadBytesSent > FlowWindow.bytes - RecordMessage.dataBytesPerRecord)
        #expect(pair.sender.state == .sending)
        // What went out ends on a record boundary (the shorter value): the receiver opened it all.
        #expect(notified.last.map { $0.count < SequencedStream.clampValueLength(valueLength) } ?? false)
    }

    @Test(arguments: Mode.allCases, [0, 1, 65_535, 65_536, 65_537, 300_001])
    func aLaggingReceiverKeepsTheSenderWithinTheWindow(mode: Mode, size: Int) throws {
        let payload = testPayload(size, seed: UInt64(size) + 3)
        var pair = try Self.pair(mode, payload: payload)
        let link = Self.runLagging(&pair)
        #expect(link.receiverError == nil && link.senderError == nil)
        #expect(link.completed == payload)
        #expect(link.largestLead <= FlowWindow.bytes)
        #expect(pair.sender.state == .acknowledged)
    }

    @Test(arguments: Mode.allCases)
    func withoutWindowTheSameLinkRunsFarAhead(mode: Mode) throws {
        let payload = testPayload(300_001, seed: 4)
        var pair = try Self.pair(mode, payload: payload, offered: [.meta, .multi, .resume, .pipeline])
        let link = Self.runLagging(&pair)
        #expect(link.completed == payload)
        // What the window bounds: without it, the sender's lead grows with the message.
        #expect(link.largestLead > 2 * FlowWindow.bytes)
    }

    @Test(arguments: Mode.allCases, [20, 182])
    func theReceiverReportsEveryIntervalAndNotAtTheEnd(mode: Mode, valueLength: Int) throws {
        let size = 100_000
        let payload = testPayload(size, seed: 5)
        var pair = try Self.pair(mode, payload: payload, valueLength: valueLength)
        let transcript = exchange(&pair)
        #expect(transcript.receiverError == nil && transcript.senderError == nil)
        #expect(transcript.completedPayload == payload)
        // The held count of each report: the receiver's progress just before its PROGRESS
        // values (a record over several values at 20 bytes is one report).
        var held: [Int] = []
        var lastProgress = 0
        var previousWasReport = false
        for event in transcript.receiverEvents {
            if case .progress(let count) = event { lastProgress = count }
            if case .progressWrite = event {
                if !previousWasReport { held.append(lastProgress) }
                previousWasReport = true
            } else {
                previousWasReport = false
            }
        }
        // Every 16 KiB held (at a DATA record's end), never for the complete message.
        #expect(held.count == size / FlowWindow.reportInterval)
        #expect(zip(held, held.dropFirst()).allSatisfy { $1 - $0 >= FlowWindow.reportInterval })
        #expect(held.allSatisfy { $0 < size && $0 % RecordMessage.dataBytesPerRecord == 0 })
    }

    @Test(arguments: Mode.allCases)
    func aResumeOffsetCountsAsAReport(mode: Mode) throws {
        let payload = testPayload(400_000, seed: 6)
        let held = Array(payload[..<200_000])
        var pair = try Self.pair(mode, payload: payload, heldPrefix: { _, _ in held })
        let link = Self.runLagging(&pair)
        #expect(link.receiverError == nil && link.senderError == nil)
        #expect(link.completed == payload)
        #expect(pair.sender.resumedAt == 200_000)
        // The sender sent what the checkpoint lacked, at most the window from 0 before the
        // RESUME arrived, and never ran more than the window ahead.
        #expect(pair.sender.payloadBytesNotified <= 200_000 + FlowWindow.bytes)
        #expect(link.largestLead <= FlowWindow.bytes)
    }

    @Test(arguments: Mode.allCases, PipelineSessionTests.AckTiming.allCases)
    func pipelinedMessagesCrossWithinTheWindow(mode: Mode, timing: PipelineSessionTests.AckTiming) throws {
        let payloads = [200_000, 0, 70_000, 5_000].enumerated().map { testPayload($1, seed: UInt64($0 + 61)) }
        let pair = try Self.pair(mode, payload: payloads[0], wantsMulti: true)
        #expect(pair.sender.pipelines && pair.sender.chosen.contains(.window))
        var driver = PipelineSessionTests.Driver(pair, payloads: payloads, timing: timing)
        driver.run()
        #expect(driver.transcript.receiverError == nil && driver.transcript.senderError == nil)
        #expect(driver.transcript.completed.map(\.payload) == payloads)
    }

    // MARK: - Bounds on PROGRESS (sender)

    /// A session paused at its window past 100 000 bytes, every write of the receiver so far
    /// delivered (its reports too), the values of the last window not yet read by the receiver.
    /// Without `window` the whole message crosses and the sender awaits its ACK.
    static func pausedAtWindow(_ mode: Mode, offered: Capabilities = offered) throws -> SessionPair {
        let payload = testPayload(300_000, seed: 8)
        var pair = try Self.pair(mode, payload: payload, offered: offered)
        while true {
            var batch: [[UInt8]] = []
            while let value = pair.sender.nextValue() { batch.append(value) }
            guard !batch.isEmpty, pair.sender.payloadBytesSent < 100_000 || !pair.sender.awaitsProgress else { break }
            for value in batch {
                for event in try pair.receive(value) {
                    if case .write(let write) = event { _ = try pair.sender.receiveWrite(write) }
                    if case .progressWrite(let write) = event { _ = try pair.sender.receiveWrite(write) }
                }
            }
        }
        return pair
    }

    enum ForgedProgress: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case beyondWhatWasSent, anotherMessage, withoutWindowChosen
        var testDescription: String { rawValue }
    }

    @Test(arguments: Mode.allCases, ForgedProgress.allCases)
    func aForgedProgressEndsTheSession(mode: Mode, forged: ForgedProgress) throws {
        let offered = forged == .withoutWindowChosen ? [.meta, .multi] : Self.offered
        var pair = try Self.pausedAtWindow(mode, offered: offered)
        let sent = UInt64(pair.sender.payloadBytesSent)
        let record: RecordMessage = switch forged {
        case .beyondWhatWasSent: .progress(message: 0, held: sent + 1)
        case .anotherMessage: .progress(message: 1, held: 0)
        case .withoutWindowChosen: .progress(message: 0, held: sent)
        }
        let writes = try pair.receiver.forgeRecord(record)
        #expect(throws: SecureSessionError.self) {
            for write in writes { _ = try pair.sender.receiveWrite(write) }
        }
        #expect(pair.sender.state == .failed)
        #expect(pair.sender.nextValue() == nil)
    }

    @Test(arguments: Mode.allCases)
    func aSmallerReportChangesNothingAndALargerOneOpensTheWindow(mode: Mode) throws {
        var pair = try Self.pausedAtWindow(mode)
        let sent = pair.sender.payloadBytesSent
        #expect(pair.sender.awaitsProgress)
        for write in try pair.receiver.forgeRecord(.progress(message: 0, held: 0)) { _ = try pair.sender.receiveWrite(write) }
        #expect(pair.sender.nextValue() == nil && pair.sender.awaitsProgress)
        for write in try pair.receiver.forgeRecord(.progress(message: 0, held: UInt64(sent))) {
            _ = try pair.sender.receiveWrite(write)
        }
        var more = 0
        while pair.sender.nextValue() != nil { more += 1 }
        #expect(more > 0)
        #expect(pair.sender.payloadBytesSent <= sent + FlowWindow.bytes)
        #expect(pair.sender.payloadBytesSent > sent + FlowWindow.bytes - RecordMessage.dataBytesPerRecord)
    }
}

extension SecureSenderSession {
    /// `window`: the next DATA would pass the central's report plus the window; awaiting PROGRESS.
    var awaitsProgress: Bool {
        guard case .data(let offset) = nextRecord else { return false }
        return !mayHandOutData(at: offset)
    }
}
