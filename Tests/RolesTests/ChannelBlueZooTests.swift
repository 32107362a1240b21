import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Storage
import Testing
import Transfer
import TestSupport
import Trust

/// Framed version 2 over an L2CAP channel (`channel`) between our Peripheral (hci0) and our
/// Central (hci1): GATT through BlueZoo, the channel through `LoopbackChannels` (this host has no
/// Bluetooth sockets), so the engines run exactly their production paths on both.
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(3)))
struct ChannelBlueZooTests {
    static let senderKey = HostIdentity(name: "sender-host")
    static let receiverKey = HostIdentity(name: "receiver-host")

    static func policy(_ identity: HostIdentity, trusting peer: HostIdentity) -> SecureModePolicy {
        SecureModePolicy(identity: identity,
                         authorizedPeers: AuthorizedPeers([AuthorizedPeers.Peer(key: peer.publicKey, name: peer.name, line: 1)]),
                         requiresSecure: true)
    }

    struct Run {
        var received: Int
        var delivered: Int
        var messages: [ReceivedMessage]
        var senderEvents: [RoleEvent]
        var receiverEvents: [RoleEvent]
    }

    /// Our Peripheral on hci0 offering the channel through `channels`, serving `source` in a task.
    static func startSender(on bus: BlueZooBus, channels: LoopbackChannels?, secureMode: SecureModePolicy?,
                            source: some MessageSource, helloTimeout: Duration = .seconds(5)) async throws
        -> (session: BluetoothSession, events: PeripheralEventLog, sending: Task<Int, any Error>) {
        let session = try await bus.openSession()
        var configuration = PeripheralConfiguration(adapterName: "hci0", fallbackValueInterval: .zero)
        configuration.secureMode = secureMode ?? .unauthenticated()
        configuration.channelTransport = channels
        configuration.channelHelloTimeout = helloTimeout
        let peripheral = Peripheral(configuration: configuration, session: session)
        let events = PeripheralEventLog(following: peripheral.events)
        return (session, events, Task { try await peripheral.run(source: source) })
    }

    /// `count` messages from a sender holding `payload` `count` times, received by our Central.
    static func exchange(_ payload: [UInt8], count: Int = 1, channels: LoopbackChannels,
                         receiverChannels: LoopbackChannels?? = .none,
                         sender: SecureModePolicy? = nil, receiver: SecureModePolicy? = nil) async throws -> Run {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let source = RepeatingMessageSource(message: OutgoingMessage(payload: payload), count: count)
        let (senderSession, senderLog, sending) = try await startSender(on: bus, channels: channels, secureMode: sender,
                                                                      source: source)
        defer { senderSession.close() }

        let (received, messages, receiverEvents) = try await receive(on: bus, count: count,
                                                                     channels: receiverChannels ?? channels,
                                                                     secureMode: receiver)
        let delivered = await value(of: sending, within: .seconds(60)) ?? 0
        return Run(received: received, delivered: delivered, messages: messages,
                   senderEvents: await senderLog.allWhenFinished(), receiverEvents: receiverEvents)
    }

    /// Our Central on hci1 receiving `count` messages, opening channels through `channels`.
    static func receive(on bus: BlueZooBus, count: Int = 1, channels: LoopbackChannels?, secureMode: SecureModePolicy? = nil)
        async throws -> (received: Int, messages: [ReceivedMessage], events: [RoleEvent]) {
        var configuration = CentralTestData.configuration(count: count, adapter: "hci1")
        configuration.channelTransport = channels
        configuration.secureMode = secureMode ?? .unauthenticated()
        let session = try await bus.openSession()
        defer { session.close() }
        let central = Central(configuration: configuration, session: session)
        let log = PeripheralEventLog(following: central.events)
        let sink = CollectingSink()
        let received = try await central.run(sink: sink, timeout: .seconds(60))
        return (received, sink.messages, await log.allWhenFinished())
    }

    /// The PSM the sender publishes in its transfer service, read by a connected `central`.
    static func publishedPSM(readBy central: ScriptedCentral) async throws -> UInt16 {
        let published = try central.device.characteristic(service: TransferUUIDs.appleSampleService.canonical,
                                                          characteristic: TransferUUIDs.channelPSMCharacteristic.canonical)
        let bytes = try await published.readValue()
        try #require(bytes.count == 2, "the PSM characteristic holds \(bytes.count) bytes")
        return UInt16(bytes[0]) | UInt16(bytes[1]) << 8
    }

    static func transports(_ events: [RoleEvent]) -> [TransferTransport] {
        events.compactMap { if case .subscribed(_, _, _, let transport) = $0 { transport } else { nil } }
    }

    @Test("without keys: the message travels over the channel, both sides say so",
          arguments: [0, 1, 8190, 8191, 200_000])
    func plainOverTheChannel(size: Int) async throws {
        let channels = LoopbackChannels()
        let bytes = CentralTestData.binary(size)
        let run = try await Self.exchange(bytes, channels: channels)
        #expect(run.received == 1 && run.delivered == 1)
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(Self.transports(run.senderEvents) == [.l2cap])
        #expect(Self.transports(run.receiverEvents) == [.l2cap])
        #expect(channels.connectionCount == 1)
        // The channel's values are its own size, far beyond an ATT value.
        let mtus = run.receiverEvents.compactMap { if case .subscribed(_, let mtu, _, _) = $0 { mtu } else { nil } }
        #expect(mtus == [SequencedStream.channelValueLengths.upperBound])
    }

    @Test("with keys on both sides: the secure mode over the channel, each side names the other's key")
    func secureOverTheChannel() async throws {
        let channels = LoopbackChannels()
        let bytes = CentralTestData.binary(100_000)
        let run = try await Self.exchange(bytes, channels: channels,
                                          sender: Self.policy(Self.senderKey, trusting: Self.receiverKey),
                                          receiver: Self.policy(Self.receiverKey, trusting: Self.senderKey))
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(run.messages.first?.authenticatedSender == Self.senderKey.publicKey.line(name: "sender-host"))
        #expect(run.senderEvents.contains { if case .subscribed(_, _, .secure, .l2cap) = $0 { true } else { false } })
        #expect(run.senderEvents.compactMap(\.deliveredSummary).first?.peerKey?.fingerprint
                == Self.receiverKey.publicKey.fingerprint)
    }

    @Test("several messages in one visit over one channel, each acknowledged")
    func severalMessagesOverOneChannel() async throws {
        let channels = LoopbackChannels()
        let bytes = CentralTestData.binary(30_000)
        let run = try await Self.exchange(bytes, count: 3, channels: channels)
        #expect(run.received == 3 && run.delivered == 3)
        #expect(run.messages.map(\.payload) == [bytes, bytes, bytes])
        #expect(channels.connectionCount == 1)
        #expect(run.receiverEvents.filter { if case .connected = $0 { true } else { false } }.count == 1)
    }

    @Test("a channel that cannot be opened: the visit goes on over GATT, with one warning")
    func fallsBackToGATT() async throws {
        let channels = LoopbackChannels()
        channels.refuseConnections()
        let bytes = CentralTestData.binary(20_000)
        let run = try await Self.exchange(bytes, channels: channels)
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(Self.transports(run.receiverEvents) == [.gatt])
        let warnings = run.receiverEvents.compactMap { if case .warning(let text) = $0 { text } else { nil } }
        #expect(warnings.contains { $0.contains("L2CAP channel") && $0.contains("using GATT notifications") })
    }

    @Test("a receiver with --no-l2cap never opens the published channel")
    func receiverWithoutChannel() async throws {
        let channels = LoopbackChannels()
        let bytes = CentralTestData.binary(5_000)
        let run = try await Self.exchange(bytes, channels: channels, receiverChannels: .some(nil))
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(Self.transports(run.senderEvents) == [.gatt])
        #expect(channels.connectionCount == 0)
    }

    @Test("a central that opens the channel and writes no HELLO, or garbage, is dropped; the next is served",
          arguments: [nil, Array("not a hello at all".utf8)])
    func hostileChannelPeers(firstWrite: [UInt8]?) async throws {
        let channels = LoopbackChannels()
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let bytes = CentralTestData.binary(10_000)
        let source = RepeatingMessageSource(message: OutgoingMessage(payload: bytes), count: 1)
        let (senderSession, senderLog, sending) = try await Self.startSender(
            on: bus, channels: channels, secureMode: nil, source: source, helloTimeout: .seconds(1))
        defer { senderSession.close() }

        // The hostile central: connected over BlueZoo, it opens the channel it read. Every wait
        // here is bounded, so a failure says where it stopped.
        let intruder = try #require(await value(of: Task { try await ScriptedCentral.connect(on: bus) },
                                                within: .seconds(60)), "the intruder did not connect over GATT")
        let psm = try await Self.publishedPSM(readBy: intruder)
        let socket = try await channels.connect(
            adapter: intruder.adapter.properties?.address, addressType: .public,
            to: try #require(intruder.device.properties?.address), peerType: .public, psm: psm, receiveMTU: 8192)
        if let firstWrite { try await socket.send(firstWrite) }
        // The sender closes it (no HELLO in a second, or not a HELLO) and says why, naming it.
        let closed = await value(of: Task { try await socket.receive() == nil }, within: .seconds(30))
        #expect(closed == true, "the sender did not close the channel: \(senderLog.all)")
        let dropped = await senderLog.waitFor(within: .seconds(30)) { if case .centralDropped = $0 { true } else { false } }
        #expect(dropped, "no line about the intruder: \(senderLog.all)")
        let reasons = senderLog.all.compactMap { if case .centralDropped(_, let reason) = $0 { reason } else { nil } }
        #expect(reasons.contains { $0.contains("L2CAP channel") })
        try? await intruder.device.disconnect()
        intruder.session.close()

        // An honest central still gets the message, over the channel.
        let honest = try await Self.receive(on: bus, channels: channels)
        #expect(honest.received == 1)
        #expect(honest.messages.map(\.payload) == [bytes])
        #expect(await value(of: sending, within: .seconds(60)) == 1)
        #expect(Self.transports(honest.events) == [.l2cap])
    }

    @Test("a silent channel does not hold up the next central's HELLO")
    func silentChannelDoesNotHoldUpTheNext() async throws {
        // The sender's HELLO wait is far longer than this test may take: the second channel
        // must not queue behind it.
        try await PatientChannelSender.run { scene in
            let silent = try await scene.openChannel()
            defer { silent.close() }
            let honest = try await scene.openChannel()
            defer { honest.close() }
            try await honest.send(HelloV2(session: 5, offered: [.secure, .channel]).encoded)
            // Served at once: the session's first value arrives while the silent channel still waits.
            let first = await value(of: Task { try await honest.receive() }, within: .seconds(30))
            #expect(first??.isEmpty == false, "the honest channel was not served: \(scene.senderLog.all)")
            #expect(!scene.senderLog.all.contains { if case .centralDropped = $0 { true } else { false } })
        }
    }

    @Test("channels waiting for their HELLO are bounded: one more is closed at once, with one line")
    func silentChannelsAreBounded() async throws {
        try await PatientChannelSender.run { scene in
            var silent: [NotificationSocket] = []
            defer { silent.forEach { $0.close() } }
            for _ in 0...Peripheral.channelsAwaitingHello {
                silent.append(try await scene.openChannel())
            }
            // The one beyond the bound is closed at once; the others still wait.
            let closed = await value(of: Task { [last = silent.last!] in try await last.receive() == nil }, within: .seconds(30))
            #expect(closed == true)
            let senderLog = scene.senderLog
            let dropped = await senderLog.waitFor(within: .seconds(30)) { if case .centralDropped = $0 { true } else { false } }
            #expect(dropped)
            let reasons = senderLog.all.compactMap { if case .centralDropped(_, let reason) = $0 { reason } else { nil } }
            #expect(reasons.count == 1)
            #expect(reasons.first?.contains("had not written their HELLO") == true)
        }
    }
}
