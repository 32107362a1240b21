import BlueZ
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import TestSupport
import Transfer

/// The scene of the tests on channels that write no HELLO: a sender on hci0 offering one
/// message over `channels` and waiting far longer for a HELLO than a test may take (so no
/// channel is closed for its silence), and a central connected to it over GATT that has read
/// the PSM the sender publishes, from which a test opens channels of its own.
struct PatientChannelSender {
    let channels: LoopbackChannels
    let senderLog: PeripheralEventLog
    let central: ScriptedCentral
    let psm: UInt16

    /// Sets the scene up on a fresh BlueZoo bus, runs `body` in it, then disconnects the
    /// central and tears everything down.
    static func run(_ body: (PatientChannelSender) async throws -> Void) async throws {
        let channels = LoopbackChannels()
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let source = RepeatingMessageSource(message: OutgoingMessage(payload: CentralTestData.binary(5_000)), count: 1)
        let (senderSession, senderLog, _) = try await ChannelBlueZooTests.startSender(
            on: bus, channels: channels, secureMode: nil, source: source, helloTimeout: .seconds(600))
        defer { senderSession.close() }
        let central = try #require(await value(of: Task { try await ScriptedCentral.connect(on: bus) }, within: .seconds(60)),
                                   "the central did not connect over GATT")
        defer { central.session.close() }
        let psm = try await ChannelBlueZooTests.publishedPSM(readBy: central)
        try await body(PatientChannelSender(channels: channels, senderLog: senderLog, central: central, psm: psm))
        try? await central.device.disconnect()
    }

    /// One more channel from the central to the sender.
    func openChannel() async throws -> NotificationSocket {
        try await channels.connect(adapter: central.adapter.properties?.address, addressType: .public,
                                   to: try #require(central.device.properties?.address), peerType: .public,
                                   psm: psm, receiveMTU: 8192)
    }
}
