import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import Trust

/// The subscription server's side of the L2CAP channel, driven directly (no bus): a channel is
/// one end of a socket pair, as `acceptChannels` hands it over after the central's HELLO.
@Suite struct ChannelServerTests {
    typealias Harness = PeripheralSubscriptionServerTests.Harness
    static let other = DeviceReference.named("/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF")
    static let limits = NotificationSocket.PacketLimits(send: 8192, receive: 8192)

    @Test func aChannelWhileAnotherCentralIsServedIsClosedWithOneLineNamingIt() async throws {
        var harness = await Harness(message: PeripheralSubscriptionServerTests.payload(100_000))
        let (local, bluez) = try NotificationSocket.makePair(mtu: 185)
        await harness.server.acceptSocket(local, device: PeripheralSubscriptionServerTests.device)
        _ = try await harness.nextSubscription()

        let (channel, central) = try NotificationSocket.makePair(limits: Self.limits)
        await harness.server.acceptChannel(channel, device: Self.other, hello: HelloV2(session: 1, offered: [.channel]))
        // Closed at once, nothing sent on it.
        #expect(try await central.receive() == nil)
        let dropped = harness.log.all.compactMap { event -> (String, String)? in
            if case .centralDropped(let peer, let reason) = event { (peer.address, reason) } else { nil }
        }
        #expect(dropped.count == 1)
        #expect(dropped.first?.0 == "AA:BB:CC:DD:EE:FF")
        #expect(dropped.first?.1.contains("another central is served") == true)
        bluez.close()
    }

    @Test func aChannelSessionSendsChannelSizedValuesAndReadsItsWritesFromTheChannel() async throws {
        let payload = PeripheralSubscriptionServerTests.payload(60_000)
        var harness = await Harness(message: payload)
        let (channel, central) = try NotificationSocket.makePair(limits: Self.limits)
        let hello = HelloV2(session: 9, offered: [.secure, .channel, .window])
        await harness.server.acceptChannel(channel, device: PeripheralSubscriptionServerTests.device, hello: hello)
        _ = try await harness.nextSubscription()
        // 8 KiB, packed into whole 247-byte PDUs (LinkPacking): 8149.
        #expect(harness.log.all.contains { if case .subscribed(_, 8149, .secure, .l2cap) = $0 { true } else { false } })

        var receiver = SecureReceiverSession(identity: HostIdentity(), authorizedPeers: .anyKey, hello: hello,
                                             maximumPayloadLength: 1 << 20, maximumWriteLength: 8192)
        var longest = 0
        var completed: [UInt8]?
        var kept: [UInt8] = []
        while completed == nil, let value = try await central.receive() {
            longest = max(longest, value.count)
            for event in try receiver.receiveNotification(value) {
                switch event {
                case .write(let write), .progressWrite(let write): try await central.send(write)
                case .appended(_, let bytes):
                    kept += bytes
                case .complete:
                    completed = kept
                    for ack in try receiver.acknowledgement(outcome: 0) { try await central.send(ack) }
                default: break
                }
            }
        }
        #expect(completed == payload)
        #expect(longest > 512)
        // `EOM` follows END; the sender waits for the channel to take it before it counts.
        #expect(try await central.receive() == WireFormat.endOfMessage)
        // The ACK arrived on the channel: the message counts, and the sender closes its end.
        let (message, summary) = try await harness.nextDelivery()
        #expect(message.payload == payload && summary.format == .secure)
        #expect(try await central.receive() == nil)
    }
}
