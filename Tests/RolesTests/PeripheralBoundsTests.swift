import BlueZ
import Foundation
import Logging
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import Trust

/// A central in range may be broken or hostile: every way it can hold the sender ends at a
/// bound, after which it is dropped (disconnected), nothing undelivered is counted, and the
/// next central is served. Driven without a bus, as `PeripheralSubscriptionServerTests`.
@Suite struct PeripheralBoundsTests {
    static let device = DeviceReference.named("/org/bluez/hci0/dev_11_22_33_44_55_66")

    /// Device paths the server asked to disconnect, in order.
    struct Disconnections: Sendable {
        let paths: AsyncStream<String>
        let continuation: AsyncStream<String>.Continuation
        init() { (paths, continuation) = AsyncStream.makeStream() }
        func record(_ path: String) { continuation.yield(path) }
        /// The next disconnection asked for.
        func next() async -> String? {
            var iterator = paths.makeAsyncIterator()
            return await iterator.next()
        }
    }

    struct Harness: SubscriptionServerHarness {
        let server: SubscriptionServer
        let accepted = AcceptedSockets()
        let delivered = DeliveredMessages()
        let log = PeripheralEventLog()
        let disconnections = Disconnections()
        var activity: AsyncStream<ServerActivity>.Iterator

        init(configuration: PeripheralConfiguration, exposure: EnhancedATTExposure = .none(because: "test"),
             message: [UInt8]) async {
            let log = self.log
            let disconnections = self.disconnections
            server = SubscriptionServer.forTests(
                configuration: configuration, delivered: delivered, exposure: exposure,
                // A cancelled task would not get the Disconnect call to bluetoothd: say so.
                disconnectDevice: { disconnections.record(Task.isCancelled ? "cancelled: \($0)" : $0.description) },
                log: log)
            activity = server.activity.makeAsyncIterator()
            await server.offer(OutgoingMessage(payload: message), sequence: 1)
        }

        mutating func nextActivity() async -> ServerActivity? { await activity.next() }

        var droppedReasons: [String] {
            log.all.compactMap { if case .centralDropped(_, let reason) = $0 { return reason } else { return nil } }
        }
        var deliveries: Int {
            log.all.filter { if case .delivered = $0 { return true } else { return false } }.count
        }
    }

    static func configuration(ack: Duration = .seconds(20), unsubscribe: Duration = .seconds(20),
                              floor: Duration = .seconds(60), rate: Int = 256) -> PeripheralConfiguration {
        PeripheralConfiguration(compatConfirmationDelay: .zero, fallbackValueInterval: .zero,
                                acknowledgementTimeout: ack, unsubscribeTimeout: unsubscribe,
                                minimumTransferRate: rate, transferTimeFloor: floor)
    }

    static func readUntilEndOfMessage(_ socket: NotificationSocket) async throws -> [[UInt8]]? {
        try await PeripheralSubscriptionServerTests.readUntilEndOfMessage(socket)
    }


    @Test func secureCentralThatNeverAcknowledgesIsDroppedAndTheNextOneIsServed() async throws {
        let payload = [UInt8](repeating: 0x41, count: 3000)
        var harness = await Harness(configuration: Self.configuration(ack: .milliseconds(300)), message: payload)
        var (central, bluez) = try await harness.subscribeSecure(session: 77, mtu: 185)
        _ = try #require(try await central.receive(from: bluez))
        // No ACK, socket kept open: the sender must not wait forever.
        try await harness.nextSubscriptionEnd("expected the central to be dropped")
        #expect(harness.deliveries == 0)
        #expect(harness.droppedReasons.count == 1 && harness.droppedReasons[0].contains("no ACK"))
        #expect(await harness.disconnections.next() == Self.device.description)
        #expect(try await bluez.receive() == nil, "the dropped central's socket is closed")

        // The message is still offered: the next central gets it from byte 0.
        let (_, secondBlueZ) = try await harness.subscribe(
            mtu: 185, device: .named("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF"), "expected a second subscription")
        let values = try #require(try await Self.readUntilEndOfMessage(secondBlueZ))
        #expect(Array(values.dropLast().joined()) == payload)
    }

    @Test func compatCentralThatNeverUnsubscribesIsDroppedAndNothingIsCounted() async throws {
        let payload = [UInt8](repeating: 0x42, count: 2000)
        var harness = await Harness(configuration: Self.configuration(unsubscribe: .milliseconds(300)), message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        try await harness.nextSubscriptionEnd("expected the central to be dropped")
        #expect(harness.deliveries == 0)
        #expect(harness.droppedReasons.first?.contains("did not unsubscribe") == true)
        #expect(harness.log.all.contains { if case .transferAborted = $0 { return true } else { return false } })
        #expect(await harness.disconnections.next() == Self.device.description)
    }

    @Test func centralThatStopsTakingValuesIsDroppedAtTheTransferDeadline() async throws {
        // 256 KiB through a socket nobody reads: the sender stalls on back-pressure. The
        // deadline is the floor plus the size at the minimum rate: 0.3 s + 256 KiB / 10 MB/s.
        let payload = [UInt8](repeating: 0x43, count: 256 * 1024)
        var harness = await Harness(configuration: Self.configuration(floor: .milliseconds(300), rate: 10_000_000),
                                    message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        try await harness.nextSubscriptionEnd("expected the central to be dropped")
        #expect(harness.deliveries == 0)
        #expect(harness.droppedReasons.first?.contains("--min-rate") == true)
        #expect(await harness.disconnections.next() == Self.device.description)
        bluez.close()
    }

    /// A version-2 central (plain mode, `window`) that takes the first window of a 300 kB
    /// message, reports nothing and leaves: the sender, paused for a PROGRESS, must not wait
    /// for its transfer deadline (60 s here) to notice; nothing is counted.
    @Test(arguments: [true, false])
    func aCentralLeavingWhileTheSenderAwaitsProgressEndsTheSubscriptionAtOnce(deviceGone: Bool) async throws {
        let payload = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        var harness = await Harness(configuration: Self.configuration(), message: payload)
        let hello = HelloV2(session: 79, offered: [.secure, .meta, .multi, .pipeline, .window])
        await harness.server.write(hello.encoded, device: Self.device, mtu: 185)
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        var receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 182)
        var held = 0
        // The sender stops at its window (64 KiB): read until the receiver holds what it can.
        while held <= FlowWindow.bytes - RecordMessage.dataBytesPerRecord {
            let value = try #require(try await bluez.receive(), "the stream ended at \(held) bytes")
            for event in try receiver.receiveNotification(value) {
                switch event {
                case .progress(let count): held = count
                // The handshake's answer goes back; PROGRESS does not (the sender must stop).
                case .write(let write): await harness.server.write(write, device: Self.device, mtu: 185)
                default: break
                }
            }
        }
        #expect(held <= FlowWindow.bytes)
        if deviceGone {
            await harness.server.deviceDisconnected(Self.device, noneConnected: true)
        } else {
            bluez.close()   // the central unsubscribed: bluetoothd closed its end
        }
        try await harness.nextSubscriptionEnd("expected the subscription to end")
        #expect(harness.deliveries == 0)
        #expect(harness.log.all.contains { if case .transferAborted = $0 { return true } else { return false } })
    }

    @Test func secureCentralThatStaysSubscribedAfterItsAckIsReleasedAndCountedOnce() async throws {
        let payload = [UInt8](repeating: 0x44, count: 1000)
        var harness = await Harness(configuration: Self.configuration(unsubscribe: .milliseconds(300)), message: payload)
        var (central, bluez) = try await harness.subscribeSecure(session: 78, mtu: 185)
        _ = try #require(try await central.receive(from: bluez))
        try await central.acknowledge()
        try await harness.nextDelivery()
        try await harness.nextSubscriptionEnd("expected the central to be released")
        #expect(harness.droppedReasons.first?.contains("after its ACK") == true)
        #expect(await harness.disconnections.next() == Self.device.description)
    }

    @Test func compatDeliveryOnALinkWithEnhancedATTIsMarkedAtRiskAndSaidSo() async throws {
        let payload = [UInt8](repeating: 0x45, count: 700)
        var harness = await Harness(configuration: Self.configuration(), exposure: .present(count: 2), message: payload)
        let (_, bluez) = try await harness.subscribe(mtu: 185)
        _ = try #require(try await Self.readUntilEndOfMessage(bluez))
        bluez.close()
        let summary = try await harness.nextDelivery().summary
        #expect(summary.ordering == .atRisk(because: "has 2 enhanced ATT bearers besides the fixed one"))
        #expect(harness.log.all.contains { if case .warning(let text) = $0 { return text.contains("out of order") } else { return false } })
    }

    @Test func secureDeliveryIsNeverMarkedAtRisk() async throws {
        let payload = [UInt8](repeating: 0x46, count: 700)
        var harness = await Harness(configuration: Self.configuration(), exposure: .present(count: 2), message: payload)
        var (central, bluez) = try await harness.subscribeSecure(session: 79, mtu: 185)
        _ = try #require(try await central.receive(from: bluez))
        try await central.acknowledge()
        let summary = try await harness.nextDelivery().summary
        #expect(summary.ordering == nil)
        bluez.close()
    }

    @Test(arguments: [0, 1, 64 * 1024 * 1024, Int.max])
    func transferDeadlinesNeverTrap(wireBytes: Int) throws {
        for rate in [1, 256, Int.max] {
            let configuration = Self.configuration(rate: rate)
            let deadline = try #require(configuration.transferDeadline(forWireBytes: wireBytes))
            #expect(deadline >= configuration.transferTimeFloor)
            #expect(deadline <= configuration.transferTimeFloor + .seconds(365 * 24 * 3600))
        }
        #expect(Self.configuration(rate: 0).transferDeadline(forWireBytes: wireBytes) == nil, "0: no floor")
        let confirmed = try #require(Self.configuration(rate: 256).transferDeadline(forWireBytes: wireBytes,
                                                                                  confirmedValues: Int.max))
        #expect(confirmed <= Self.configuration(rate: 256).transferTimeFloor + .seconds(365 * 24 * 3600))
    }

    @Test func confirmedIndicationsGetTimeForTheirRoundTrips() throws {
        // 16 KiB in 20-byte values: 820 values; at 256 bytes/s that is 64 s, but 820 round
        // trips of 60–100 ms need more.
        let configuration = Self.configuration(rate: 256)
        let plain = try #require(configuration.transferDeadline(forWireBytes: 820 * 20))
        let confirmed = try #require(configuration.transferDeadline(forWireBytes: 820 * 20, confirmedValues: 820))
        #expect(plain == configuration.transferTimeFloor + .milliseconds(64_062))
        #expect(confirmed == configuration.transferTimeFloor + .seconds(205))
        // Large values: the byte rate is the longer bound and stays.
        let large = try #require(configuration.transferDeadline(forWireBytes: 32 * 512, confirmedValues: 32))
        #expect(large == configuration.transferTimeFloor + .milliseconds(64_000))
    }
}

private extension PeripheralConfiguration {
    /// The subscription deadline a connection under this configuration runs with (`TransferDeadline`).
    func transferDeadline(forWireBytes wireBytes: Int, confirmedValues: Int = 0) -> Duration? {
        connectionSettings.deadline.limit(forWireBytes: wireBytes, confirmedValues: confirmedValues)
    }
}
