import BlueZ
import Foundation
import Logging
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import Trust

/// The peripheral's delivery rules, driven directly (no bus): BlueZ's end of the AcquireNotify
/// socket is the other half of a socket pair, writes and hang-ups are the calls BlueZ would make.
@Suite struct PeripheralSubscriptionServerTests {
    static let device = DeviceReference.named("/org/bluez/hci0/dev_11_22_33_44_55_66")

    struct Harness: SubscriptionServerHarness {
        let server: SubscriptionServer
        let accepted = AcceptedSockets()
        let delivered = DeliveredMessages()
        let log: PeripheralEventLog
        var activity: AsyncStream<ServerActivity>.Iterator

        init(grace: Duration = .seconds(3), compatConfirmation: Duration = .zero, bluetoothUp: Bool = true,
             exposure: EnhancedATTExposure = .none(because: "one bearer in these tests"),
             valueSizeLimit: Int? = nil, message: [UInt8]?) async {
            let log = PeripheralEventLog()
            let configuration = PeripheralConfiguration(
                acknowledgementGrace: grace, compatConfirmationDelay: compatConfirmation, fallbackValueInterval: .zero,
                valueSizeLimit: valueSizeLimit)
            server = SubscriptionServer.forTests(configuration: configuration, delivered: delivered, bluetoothUp: bluetoothUp,
                                                 exposure: exposure, log: log)
            self.log = log
            activity = server.activity.makeAsyncIterator()
            if let message {
                await server.offer(OutgoingMessage(payload: message), sequence: 1)
            }
        }

        mutating func nextActivity() async -> ServerActivity? {
            await activity.next()
        }
    }

    /// Reads values from BlueZ's end until `EOM`; nil if the socket closed first.
    static func readUntilEndOfMessage(_ socket: NotificationSocket) async throws -> [[UInt8]]? {
        var values: [[UInt8]] = []
        while let value = try await socket.receive() {
            values.append(value)
            if value == WireFormat.endOfMessage { return values }
        }
        return nil
    }

    static func payload(_ count: Int, seed: UInt8 = 7) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }
    }

    @Test func compatSubscriberGetsTheWholeMessageAndUnsubscribingAfterEOMCountsAsDelivered() async throws {
        let payload = Self.payload(5000)
        var harness = await Harness(message: payload)
        let (local, bluez) = try NotificationSocket.makePair(mtu: 185)
        await harness.server.acceptSocket(local, device: Self.device)

        let peer = try await harness.nextSubscription()
        #expect(peer.address == "11:22:33:44:55:66")
        let values = try #require(try await Self.readUntilEndOfMessage(bluez))
        #expect(values.dropLast().allSatisfy { $0.count <= 182 && $0 != WireFormat.endOfMessage })
        #expect(Array(values.dropLast().joined()) == payload)
        #expect(harness.log.subscribedFormats == [.compat])

        bluez.close()   // the central unsubscribed: BlueZ releases the socket
        let (message, summary) = try await harness.nextDelivery()
        #expect(message.payload == payload)
        #expect(summary.byteCount == 5000 && summary.format == .compat && summary.sequence == 1)
        try await harness.nextSubscriptionEnd()
        #expect(harness.log.abortReasons.isEmpty)
    }

    @Test func secureSubscriberIsDeliveredOnlyByItsSealedAck() async throws {
        let payload = Array("grüße, 世界 ✓".utf8) + Self.payload(3000)
        var harness = await Harness(message: payload)
        var (central, bluez) = try await harness.subscribeSecure(session: 0xDEAD_BEEF_0102_0304, mtu: 247)

        #expect(try await central.receive(from: bluez) == payload)
        #expect(harness.log.subscribedFormats == [.secure])

        // Writes of other devices while the session runs: none of them may count or reach it.
        let stranger = DeviceReference.named("/org/bluez/hci0/dev_99_99_99_99_99_99")
        await harness.server.write([0x00, 0xFF, 0x13], device: stranger, mtu: 247)
        await harness.server.write([UInt8](repeating: 0x41, count: 100_000), device: stranger, mtu: 247)
        await harness.server.write([], device: stranger, mtu: 247)
        #expect(!harness.log.all.contains { if case .delivered = $0 { true } else { false } })

        try await central.acknowledge()
        let summary = try await harness.nextDelivery("expected a delivery after the ACK").summary
        #expect(summary.format == .secure)
        #expect(summary.sha256 == OutgoingMessage(payload: payload).digest.map { String(format: "%02x", $0) }.joined())

        bluez.close()
        try await harness.nextSubscriptionEnd()
    }

    @Test func aVersion1CentralIsRefusedWithOneLineAndGetsNoValue() async throws {
        var harness = await Harness(message: Self.payload(300))
        let bluez = try await harness.subscribeVersion1(session: 41, mtu: 100)
        // Not one value: the socket is closed at once.
        #expect(try await bluez.receive() == nil)
        let dropped = harness.log.all.compactMap { if case .centralDropped(_, let reason) = $0 { reason } else { nil } }
        #expect(dropped == [SenderConnection.version1Refusal])
        #expect(harness.log.subscribedFormats.isEmpty)
        // The message is still offered: a central speaking the framed protocol gets it.
        var (central, secureBlueZ) = try await harness.subscribeSecure(session: 42, mtu: 100)
        #expect(try await central.receive(from: secureBlueZ) == Self.payload(300))
        try await central.acknowledge()
        try await harness.nextDelivery()
    }

    @Test func unsubscribingMidTransferCountsNothingAndTheNextSubscriberStartsAtByteZero() async throws {
        let payload = Self.payload(20_000)
        var harness = await Harness(message: payload)

        let (_, firstBlueZ) = try await harness.subscribe(mtu: 23)
        for _ in 0..<10 { _ = try await firstBlueZ.receive() }
        firstBlueZ.close()
        try await harness.nextSubscriptionEnd("an early unsubscription must end the subscription without a delivery")
        #expect(harness.log.abortReasons.count == 1)
        #expect(harness.log.abortReasons.first?.contains("unsubscribed") == true)

        let (_, secondBlueZ) = try await harness.subscribe(mtu: 23, "expected a second subscription")
        let values = try #require(try await Self.readUntilEndOfMessage(secondBlueZ))
        #expect(Array(values.dropLast().joined()) == payload)
        secondBlueZ.close()
        try await harness.nextDelivery("expected the second subscriber's delivery")
    }

    @Test func disconnectionRightAfterEOMWasReadCountsAsDelivered() async throws {
        // A fast central reads EOM, unsubscribes and disconnects before the sender's drain
        // poll comes round: what bluetoothd had read when we stopped the channel decides.
        var harness = await Harness(message: Self.payload(3000))
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        await harness.server.deviceDisconnected(Self.device, noneConnected: true)
        try await harness.nextDelivery("EOM was read before the central left: delivered")
        _ = bluez
    }

    @Test func disconnectionWithValuesStillUnreadIsNotDelivered() async throws {
        var harness = await Harness(message: Self.payload(300))
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        // Every value fits the socket at once, none is read: the central leaves.
        await harness.log.waitFor { event in
            if case .progress(_, let progress, _, _) = event { progress.bytesSoFar == 300 } else { false }
        }
        await harness.server.deviceDisconnected(Self.device, noneConnected: true)
        try await harness.nextSubscriptionEnd("nothing was read: not delivered")
        #expect(harness.log.abortReasons.count == 1)
        _ = bluez
    }

    @Test func compatHangUpWhileBluetoothGoesAwayIsNotDelivered() async throws {
        // The adapter switched off: the socket hangs up as if the central unsubscribed, after
        // bluetoothd read everything (it reads ahead of the radio).
        var harness = await Harness(compatConfirmation: .milliseconds(10), bluetoothUp: false, message: Self.payload(500))
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        bluez.close()
        try await harness.nextSubscriptionEnd("not delivered when Bluetooth did not stay up")
        #expect(harness.log.abortReasons.first?.contains("Bluetooth went away") == true)
    }

    @Test func teardownDuringTheCompatConfirmationCountsNothing() async throws {
        var harness = await Harness(compatConfirmation: .seconds(60), message: Self.payload(500))
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        bluez.close()
        // Whether or not the server saw the hang-up yet, the teardown must count nothing.
        await harness.server.shutDown(reason: "the adapter was powered off")
        if let next = await harness.nextActivity() {
            Issue.record("the activity stream should end without a delivery, got \(next)")
        }
        #expect(harness.log.abortReasons == ["the adapter was powered off"])
    }

    @Test func secureHangUpWithoutAckIsNotDelivered() async throws {
        var harness = await Harness(grace: .milliseconds(20), message: Self.payload(300))
        var (central, bluez) = try await harness.subscribeSecure(session: 42, mtu: 100)
        #expect(try await central.receive(from: bluez) != nil)
        bluez.close()
        try await harness.nextSubscriptionEnd("a framed transfer without ACK must end undelivered")
        #expect(harness.log.abortReasons == ["the central left without acknowledging the message, after 300 of 300 bytes"])
    }

    @Test func ackArrivingAfterTheCentralLeftStillCounts() async throws {
        var harness = await Harness(grace: .seconds(30), message: Self.payload(300))
        var (central, bluez) = try await harness.subscribeSecure(session: 43, mtu: 100)
        #expect(try await central.receive(from: bluez) != nil)
        // The central leaves, and only after the server handled that does its ACK arrive
        // (whatever the transfer task is doing at that moment, the outcome must be the same).
        await harness.server.deviceDisconnected(Self.device, noneConnected: true)
        try await central.acknowledge()
        try await harness.nextDelivery("an ACK racing the hang-up must still count")
        try await harness.nextSubscriptionEnd()
    }

    @Test func disconnectionMidTransferCountsNothing() async throws {
        var harness = await Harness(message: Self.payload(50_000))
        let (_, bluez) = try await harness.subscribe(mtu: 23)
        _ = try await bluez.receive()
        await harness.server.deviceDisconnected(Self.device, noneConnected: true)
        try await harness.nextSubscriptionEnd("a disconnection must end the subscription")
        #expect(harness.log.abortReasons.first?.contains("disconnected") == true)
        _ = bluez
    }

    @Test func aSecondSubscriberWhileServingIsRefused() async throws {
        var harness = await Harness(message: Self.payload(100_000))
        let (_, firstBlueZ) = try await harness.subscribe(mtu: 23)
        let (second, secondBlueZ) = try NotificationSocket.makePair(mtu: 23)
        await harness.server.acceptSocket(second, device: .named("/org/bluez/hci0/dev_AA_AA_AA_AA_AA_AA"))
        #expect(try await secondBlueZ.receive() == nil)
        #expect(harness.log.all.contains { if case .warning = $0 { true } else { false } })
        _ = firstBlueZ
        await harness.server.shutDown(reason: "test over")
    }

    @Test func aDeliveredMessageIsNotServedAgainUntilTheNextIsOffered() async throws {
        var harness = await Harness(message: Array("once".utf8))
        let (_, bluez) = try await harness.subscribe(mtu: 23)
        _ = try await Self.readUntilEndOfMessage(bluez)
        bluez.close()
        try await harness.nextDelivery()
        _ = await harness.nextActivity()
        let (again, againBlueZ) = try NotificationSocket.makePair(mtu: 23)
        await harness.server.acceptSocket(again, device: Self.device)
        #expect(try await againBlueZ.receive() == nil)
    }

    @Test func fallbackPathNotifiesThroughTheEmitterAndStopNotifyAfterEOMDelivers() async throws {
        let payload = Self.payload(1000)
        var harness = await Harness(message: payload)
        let emitted = EmittedValues()
        await harness.server.attachFallbackEmitter { value, _ in emitted.append(value) }
        // The device wrote something first, so its MTU is known.
        await harness.server.write([0x01], device: Self.device, mtu: 100)
        await harness.server.acceptFallback(device: Self.device)
        try await harness.nextSubscription()
        await emitted.waitForEndOfMessage()
        let values = emitted.all
        #expect(values.dropLast().allSatisfy { $0.count <= 97 })
        #expect(Array(values.dropLast().joined()) == payload)
        await harness.server.fallbackStopped()
        try await harness.nextDelivery("StopNotify after EOM must count as delivered")
    }

    @Test func fallbackWithoutKnownMTUUsesTwentyByteValues() async throws {
        var harness = await Harness(message: Self.payload(200))
        let emitted = EmittedValues()
        await harness.server.attachFallbackEmitter { value, _ in emitted.append(value) }
        await harness.server.acceptFallback(device: nil)
        _ = await harness.nextActivity()
        await emitted.waitForEndOfMessage()
        #expect(emitted.all.allSatisfy { $0.count <= 20 })
        await harness.server.shutDown(reason: "test over")
    }

    @Test func helloFromAnotherDeviceDoesNotMakeASubscriptionFramed() async throws {
        var harness = await Harness(message: Self.payload(10))
        await harness.server.write(HelloV2(session: 9, offered: [.secure]).encoded,
                                   device: .named("/org/bluez/hci0/dev_AA_AA_AA_AA_AA_AA"), mtu: 23)
        let (_, bluez) = try await harness.subscribe(mtu: 23)
        #expect(harness.log.subscribedFormats == [.compat])
        _ = bluez
        await harness.server.shutDown(reason: "test over")
    }

    // MARK: Confirmed indications (Apple's flow over Enhanced ATT)

    /// Reads values from BlueZ's end, confirming each one as bluetoothd would after the
    /// central's Handle Value Confirmation, until `EOM` (confirmed too unless told not to).
    /// `ours` is the server's end: its send queue must be empty while a value is unconfirmed.
    static func readConfirming(_ socket: NotificationSocket, ours: NotificationSocket, server: SubscriptionServer,
                               confirmEndOfMessage: Bool = true) async throws -> [[UInt8]] {
        var values: [[UInt8]] = []
        while let value = try await socket.receive() {
            values.append(value)
            if value == WireFormat.endOfMessage {
                if confirmEndOfMessage { await server.indicationConfirmed() }
                return values
            }
            // While this value is unconfirmed nothing else may have been written.
            #expect(try ours.unsentByteCount == 0, "a value was sent before the previous one was confirmed")
            await server.indicationConfirmed()
        }
        return values
    }

    @Test func confirmedIndicationsDeliverInOrderAndAreNotMarkedAtRiskOverEnhancedATT() async throws {
        let payload = Self.payload(6000)
        var harness = await Harness(exposure: .present(count: 2), message: payload)
        let (local, bluez) = try await harness.subscribe(mtu: 185, indications: true)
        let values = try await Self.readConfirming(bluez, ours: local, server: harness.server)
        #expect(values.last == WireFormat.endOfMessage)
        #expect(Array(values.dropLast().joined()) == payload)

        bluez.close()   // the central unsubscribed after EOM
        let summary = try await harness.nextDelivery().summary
        #expect(summary.format == .compat)
        #expect(summary.ordering == nil)
        #expect(!harness.log.all.contains { if case .warning(let text) = $0 { text.contains("out of order") } else { false } })
    }

    @Test func aCentralLeavingBeforeConfirmingEOMIsNotCounted() async throws {
        let payload = Self.payload(2000)
        var harness = await Harness(grace: .milliseconds(50), exposure: .present(count: 2), message: payload)
        let (local, bluez) = try await harness.subscribe(mtu: 185, indications: true)
        let values = try await Self.readConfirming(bluez, ours: local, server: harness.server, confirmEndOfMessage: false)
        #expect(values.last == WireFormat.endOfMessage)
        bluez.close()
        try await harness.nextSubscriptionEnd("expected the subscription to end without a delivery")
        #expect(!harness.log.abortReasons.isEmpty)
    }

    @Test func anEOMConfirmationArrivingAfterTheHangUpStillCounts() async throws {
        let payload = Self.payload(1500)
        var harness = await Harness(exposure: .present(count: 2), message: payload)
        let (local, bluez) = try await harness.subscribe(mtu: 185, indications: true)
        let values = try await Self.readConfirming(bluez, ours: local, server: harness.server, confirmEndOfMessage: false)
        #expect(Array(values.dropLast().joined()) == payload)
        bluez.close()                                   // the unsubscription overtakes…
        await harness.server.indicationConfirmed()      // …the confirmation of EOM
        let summary = try await harness.nextDelivery().summary
        #expect(summary.ordering == nil)
    }

    @Test func confirmationsWrittenToTheSocketCountLikeConfirmCalls() async throws {
        // Newer BlueZ writes 0x01 to the AcquireNotify socket per confirmation.
        let payload = Self.payload(3000)
        var harness = await Harness(exposure: .present(count: 2), message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 185, indications: true)
        var values: [[UInt8]] = []
        while let value = try await bluez.receive() {
            values.append(value)
            try await bluez.send([0x01])
            if value == WireFormat.endOfMessage { break }
        }
        #expect(Array(values.dropLast().joined()) == payload)
        bluez.close()
        let summary = try await harness.nextDelivery().summary
        #expect(summary.ordering == nil)
    }

    @Test func valueSizeLimitCapsValuesBelowTheLinkMTU() async throws {
        let payload = Self.payload(1000)
        var harness = await Harness(valueSizeLimit: 20, message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 247)
        let values = try #require(try await Self.readUntilEndOfMessage(bluez))
        #expect(values.allSatisfy { $0.count <= 20 })
        #expect(values.count == 1000 / 20 + 1)
        #expect(Array(values.dropLast().joined()) == payload)
    }

    @Test func withNotificationsTheSameLinkIsMarkedAtRisk() async throws {
        let payload = Self.payload(1000)
        var harness = await Harness(exposure: .present(count: 2), message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        bluez.close()
        let summary = try await harness.nextDelivery().summary
        #expect(summary.ordering != nil)
    }
}

/// Values the fallback emitter was given; signals when `EOM` arrives.
final class EmittedValues: @unchecked Sendable {
    // @unchecked Sendable: all state is guarded by `lock`.
    private let lock = NSLock()
    private var values: [[UInt8]] = []
    private var waiters: [CheckedContinuation<Void, Never>] = []

    func append(_ value: [UInt8]) {
        lock.lock()
        values.append(value)
        let ready = value == WireFormat.endOfMessage ? waiters : []
        if !ready.isEmpty { waiters.removeAll() }
        lock.unlock()
        for waiter in ready { waiter.resume() }
    }

    var all: [[UInt8]] {
        lock.lock()
        defer { lock.unlock() }
        return values
    }

    func waitForEndOfMessage() async {
        await withCheckedContinuation { continuation in
            lock.lock()
            if values.last == WireFormat.endOfMessage {
                lock.unlock()
                continuation.resume()
            } else {
                waiters.append(continuation)
                lock.unlock()
            }
        }
    }
}
