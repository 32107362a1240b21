import BlueZ
import Foundation
@testable import Machines
@testable import Roles
@testable import Storage
import Testing
import Transfer
import TestSupport

/// Our send → our receive over BlueZoo: the Peripheral engine on hci0, the Central engine on
/// hci1, each with its own session, as two processes would be.
@Suite(.serialized, .needsBlueZoo, .timeLimit(.minutes(2)))
struct EndToEndBlueZooTests {
    enum Payload: String, CaseIterable, Sendable {
        case text, utf8, binary, empty

        var bytes: [UInt8] {
            switch self {
            case .text: Array("hello from bletransfer".utf8)
            case .utf8: Array(String(repeating: "Grüße ✓ 𝄞 日本語 ", count: 40).utf8)
            case .binary: CentralTestData.binary(70_000) + Array("EOM".utf8)
            case .empty: []
            }
        }
    }

    /// Runs our Peripheral on hci0 and our Central on hci1 over one BlueZoo bus, each with its
    /// own session as two processes would; returns what arrived and what the sender reported.
    static func transfer(_ bytes: [UInt8], sender configuration: PeripheralConfiguration, framed: Bool) async throws
        -> (received: Int, delivered: Int, messages: [ReceivedMessage], summaries: [MessageSummary]) {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }

        let senderSession = try await bus.openSession()
        defer { senderSession.close() }
        let peripheral = Peripheral(configuration: configuration, session: senderSession)
        let source = RepeatingMessageSource(message: OutgoingMessage(payload: bytes), count: 1)
        let senderEvents = PeripheralEventLog(following: peripheral.events)
        let sending = Task { try await peripheral.run(source: source) }
        defer { sending.cancel() }

        let receiverSession = try await bus.openSession()
        defer { receiverSession.close() }
        let central = Central(configuration: CentralTestData.configuration(adapter: "hci1", framed: framed),
                              session: receiverSession)
        let sink = CollectingSink()
        let received = try await central.run(sink: sink, timeout: .seconds(60))
        let delivered = await value(of: sending, within: .seconds(60)) ?? 0
        let summaries = await senderEvents.allWhenFinished().compactMap(\.deliveredSummary)
        return (received, delivered, sink.messages, summaries)
    }

    @Test("send → receive", arguments: Payload.allCases, [true, false])
    func sendToReceive(payload: Payload, framed: Bool) async throws {
        let bytes = payload.bytes
        let run = try await Self.transfer(
            bytes, sender: PeripheralConfiguration(adapterName: "hci0", fallbackValueInterval: .zero), framed: framed)
        #expect(run.received == 1)
        #expect(run.delivered == 1)
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(run.messages.first?.format == (framed ? .secure : .compat))
        // Between two bletransfer hosts the framed protocol is encrypted, keys or not.
        #expect(run.summaries.map(\.format) == [framed ? .secure : .compat])
        #expect(run.summaries.first?.byteCount == bytes.count)
    }

    @Test("with confirmed indications on Apple's characteristic, a bletransfer central takes the framed one (notify)")
    func framedBesideIndications() async throws {
        let bytes = CentralTestData.binary(30_000)
        let run = try await Self.transfer(
            bytes, sender: PeripheralConfiguration(adapterName: "hci0", fallbackValueInterval: .zero,
                                                   compatDelivery: .indications),
            framed: true)
        #expect(run.received == 1 && run.delivered == 1)
        #expect(run.messages.map(\.payload) == [bytes])
        #expect(run.messages.first?.format == .secure)
    }
}

@Suite struct CompatDeliveryTests {
    @Test func automaticIndicatesOnlyWhereEnhancedATTIsPossible() {
        let one = GATTChannelSetting(channels: 1, file: nil, isExplicit: true)
        let three = GATTChannelSetting(channels: 3, file: nil, isExplicit: false)
        #expect(!CompatDelivery.automatic.usesIndications(on: one))
        #expect(CompatDelivery.automatic.usesIndications(on: three))
        #expect(!CompatDelivery.notifications.usesIndications(on: three))
        #expect(CompatDelivery.indications.usesIndications(on: one))
    }
}
