@testable import BlueZ
import Testing

@Suite("Link: management commands, HCI link events and link commands, as bytes")
struct LinkTests {
    // MARK: management channel

    @Test("a command is code, controller, length and parameters, little-endian")
    func commandBytes() {
        let command = ManagementCommand(code: 0x0045, controller: 1, parameters: [0x00, 0x1E, 0, 0], name: "Set PHY")
        #expect(command.encoded == [0x45, 0x00, 0x01, 0x00, 0x04, 0x00, 0x00, 0x1E, 0x00, 0x00])
    }

    @Test("the reply is the Command Complete or Status of the same code and controller")
    func replyMatching() {
        let command = ManagementCommand(code: 0x0044, controller: 0, name: "Get PHY Configuration")
        let complete: [UInt8] = [0x01, 0x00, 0x00, 0x00, 0x0F, 0x00, 0x44, 0x00, 0x00] + [UInt8](repeating: 0xAB, count: 12)
        let reply = ManagementReply.answering(command, in: complete)
        #expect(reply?.status == .success)
        #expect(reply?.parameters.count == 12)
        let denied: [UInt8] = [0x02, 0x00, 0x00, 0x00, 0x03, 0x00, 0x44, 0x00, 0x14]
        #expect(ManagementReply.answering(command, in: denied)?.status == .permissionDenied)
        // Another controller, another code, another event, a short packet: not the answer.
        #expect(ManagementReply.answering(command, in: [0x01, 0x00, 0x01, 0x00, 0x03, 0x00, 0x44, 0x00, 0x00]) == nil)
        #expect(ManagementReply.answering(command, in: [0x01, 0x00, 0x00, 0x00, 0x03, 0x00, 0x45, 0x00, 0x00]) == nil)
        #expect(ManagementReply.answering(command, in: [0x06, 0x00, 0x00, 0x00, 0x03, 0x00, 0x44, 0x00, 0x00]) == nil)
        #expect(ManagementReply.answering(command, in: [0x01, 0x00, 0x00, 0x00, 0x09, 0x00, 0x44]) == nil)
    }

    @Test("a denied command and a refused socket both read as a missing privilege")
    func permission() {
        #expect(ManagementError.refused(command: "x", .permissionDenied).isPermissionDenied)
        #expect(ManagementError.systemCall("bind", .notPermitted).isPermissionDenied)
        #expect(!ManagementError.refused(command: "x", .notSupported).isPermissionDenied)
        #expect(!ManagementError.timedOut(command: "x").isPermissionDenied)
    }

    @Test("PHY configuration: 2M offered, selected, and what selecting it writes")
    func phyConfiguration() throws {
        var bytes: [UInt8] = []
        bytes.appendLittleEndian(UInt32(0x7E00 | 0x1))   // LE 1M/2M/Coded both ways, BR 1-slot
        bytes.appendLittleEndian(UInt32(0x7800))         // 2M and Coded configurable
        bytes.appendLittleEndian(UInt32(0x0601))         // LE 1M both ways selected
        let configuration = try #require(PHYConfiguration(parameters: bytes))
        #expect(configuration.offers2M)
        #expect(!configuration.uses2M)
        #expect(configuration.selected.union(.le2M).rawValue == 0x1E01)
        #expect(PHYConfiguration(parameters: Array(bytes.prefix(11))) == nil)
    }

    @Test("system configuration: the type-length-value list both ways; unknown and cut entries skipped")
    func systemConfiguration() {
        let target = AdapterLinkTarget.tuned.systemConfiguration
        let decoded = SystemConfiguration(parameters: target.encoded)
        #expect(decoded == target)
        #expect(decoded[.connectionMinInterval] == 6)
        #expect(decoded[.connectionMaxInterval] == 12)
        // An unknown type (0x0003, one byte) before a known one, and a last entry cut short.
        let read: [UInt8] = [0x03, 0x00, 0x01, 0x07, 0x17, 0x00, 0x02, 0x18, 0x00, 0x18, 0x00, 0x02, 0x28]
        let parsed = SystemConfiguration(parameters: read)
        #expect(parsed.values == [.connectionMinInterval: 0x18])
        #expect(AdapterLinkTarget.kernel.isMet(by: SystemConfiguration([.connectionMinInterval: 24, .connectionMaxInterval: 40])))
        #expect(!AdapterLinkTarget.tuned.isMet(by: SystemConfiguration([.connectionMinInterval: 24, .connectionMaxInterval: 40])))
    }

    @Test("a refusal for privilege alone names the one command that would set it")
    func tuningSummary() {
        var outcome = AdapterTuningOutcome()
        outcome.refusals = [LinkRefusal(setting: "2M PHY", limit: .privilege, detail: "needs CAP_NET_ADMIN"),
                            LinkRefusal(setting: "a 7.5–15 ms interval", limit: .privilege, detail: "needs CAP_NET_ADMIN")]
        #expect(outcome.summary.contains("sudo bletransfer link tune"))
        #expect(outcome.summary.contains("2M PHY and a 7.5–15 ms interval"))
        outcome.refusals = [LinkRefusal(setting: "2M PHY", limit: .controller, detail: "the controller has no 2M PHY")]
        #expect(outcome.summary == "link: 2M PHY: the controller has no 2M PHY")
        outcome.refusals = []
        outcome.applied = ["2M PHY"]
        #expect(outcome.summary == "link tuned: 2M PHY")
    }

    // MARK: HCI link events

    static func event(_ code: UInt8, _ parameters: [UInt8]) -> [UInt8] {
        [0x04, code, UInt8(parameters.count)] + parameters
    }

    static func connectionComplete(handle: UInt16, central: Bool, interval: UInt16) -> [UInt8] {
        var p: [UInt8] = [0x01, 0x00]
        p.appendLittleEndian(handle)
        p += [central ? 0 : 1, 0x00, 1, 2, 3, 4, 5, 6]
        p.appendLittleEndian(interval)
        p.appendLittleEndian(UInt16(0))
        p.appendLittleEndian(UInt16(42))
        p.append(0)
        return event(0x3E, p)
    }

    @Test("a link's parameters follow its events until it ends")
    func ledger() {
        var ledger = LinkEventLedger()
        #expect(ledger.apply(Self.connectionComplete(handle: 0x0042, central: true, interval: 40)) == 0x42)
        var link = ledger.links[0x42]
        #expect(link?.intervalMilliseconds == 50)
        #expect(link?.supervisionTimeoutMilliseconds == 420)
        #expect(link?.isCentral == true)
        #expect(link?.peer == "06:05:04:03:02:01")
        #expect(link?.summary == "1M · 50 ms · 27 B")
        // Data length change (251 both ways), PHY update (2M), connection update (15 ms).
        var dl: [UInt8] = [0x07, 0x42, 0x00]
        for value: UInt16 in [251, 2120, 251, 2120] { dl.appendLittleEndian(value) }
        ledger.apply(Self.event(0x3E, dl))
        ledger.apply(Self.event(0x3E, [0x0C, 0x00, 0x42, 0x00, 0x02, 0x02]))
        var update: [UInt8] = [0x03, 0x00, 0x42, 0x00]
        for value: UInt16 in [12, 0, 100] { update.appendLittleEndian(value) }
        ledger.apply(Self.event(0x3E, update))
        link = ledger.links[0x42]
        #expect(link?.summary == "2M · 15 ms · 251 B")
        #expect(link?.supervisionTimeoutMilliseconds == 1000)
        // A failed update changes nothing; another handle's disconnection neither.
        #expect(ledger.apply(Self.event(0x3E, [0x03, 0x3B, 0x42, 0x00, 6, 0, 0, 0, 42, 0])) == nil)
        #expect(ledger.apply(Self.event(0x05, [0x00, 0x43, 0x00, 0x13])) == nil)
        #expect(ledger.links[0x42]?.intervalUnits == 12)
        #expect(ledger.apply(Self.event(0x05, [0x00, 0x42, 0x00, 0x13])) == 0x42)
        #expect(ledger.links.isEmpty)
    }

    @Test("malformed and foreign packets change nothing")
    func ledgerHostileInput() {
        var ledger = LinkEventLedger()
        for packet: [UInt8] in [[], [0x04], [0x04, 0x3E], [0x04, 0x3E, 0x05, 0x01], [0x02, 0x3E, 0x01, 0x01],
                                [0x04, 0x3E, 0x02, 0x01, 0x00], [0x04, 0x0E, 0x04, 0x01, 0x03, 0x0C, 0x00],
                                [0x04, 0x3E, 0x03, 0x0C, 0x00, 0x01]] {
            #expect(ledger.apply(packet) == nil)
        }
        #expect(ledger.links.isEmpty)
    }

    // MARK: link commands

    @Test("link commands as a raw HCI socket sends them")
    func commands() {
        #expect(LinkCommand.setPHY(handle: 0x42, phy: .le2M).packet == [0x01, 0x32, 0x20, 7, 0x42, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00])
        let update = LinkCommand.updateConnection(handle: 1, minInterval: 6, maxInterval: 12, latency: 0, timeout: 42).packet
        #expect(update.prefix(4) == [0x01, 0x13, 0x20, 14])
        #expect(Array(update[4...]) == [1, 0, 6, 0, 12, 0, 0, 0, 42, 0, 0, 0, 0, 0])
    }
}

@Suite("Link: what holds a link back, and when a tuned one steps back")
struct LinkJudgementTests {
    static func link(phy: LEPHY, interval: UInt16, octets: UInt16) -> LinkParameters {
        var link = LinkParameters(handle: 1)
        link.transmitPHY = phy
        link.intervalUnits = interval
        link.transmitOctets = octets
        return link
    }

    @Test("a link at its best has no limits")
    func best() {
        let tuned = AdapterTuningOutcome()
        #expect(LinkJudgement.limits(of: Self.link(phy: .le2M, interval: 12, octets: 251), tuning: tuned).isEmpty)
    }

    @Test("this host's refusal names the limit; otherwise the peer, or the configuration when tuning is off")
    func limits() {
        var denied = AdapterTuningOutcome()
        denied.refusals = [LinkRefusal(setting: "2M PHY", limit: .privilege, detail: "needs CAP_NET_ADMIN"),
                           LinkRefusal(setting: "a 7.5–15 ms interval", limit: .privilege, detail: "needs CAP_NET_ADMIN")]
        let slow = Self.link(phy: .le1M, interval: 40, octets: 27)
        let byPrivilege = LinkJudgement.limits(of: slow, tuning: denied)
        #expect(byPrivilege.map(\.limit) == [.privilege, .privilege, .peer])
        #expect(byPrivilege[1].setting == "50 ms interval")
        let byPeer = LinkJudgement.limits(of: slow, tuning: AdapterTuningOutcome())
        #expect(byPeer.map(\.limit) == [.peer, .peer, .peer])
        let off = LinkJudgement.limits(of: slow, tuning: nil)
        #expect(off.prefix(2).map(\.limit) == [.configuration, .configuration])
        var noTwoM = AdapterTuningOutcome()
        noTwoM.refusals = [LinkRefusal(setting: "2M PHY", limit: .controller, detail: "the controller has no 2M PHY")]
        #expect(LinkJudgement.limits(of: Self.link(phy: .le1M, interval: 12, octets: 251), tuning: noTwoM).map(\.limit)
                == [.controller])
    }

    @Test("a rate falling under a third of the best window's steps back once; a steady or new one does not")
    func fallback() {
        var fallback = LinkFallback()
        var bytes = 0
        var stepped: (now: Double, best: Double)?
        // 30 kB/s for 20 s: never.
        for second in 0...20 {
            bytes += 30_000
            #expect(fallback.record(bytes: bytes, at: .seconds(second)) == nil)
        }
        // Then 5 kB/s: within a window it falls under 10 kB/s and steps back, once.
        for second in 21...40 {
            bytes += 5_000
            if let rates = fallback.record(bytes: bytes, at: .seconds(second)) {
                #expect(stepped == nil)
                stepped = rates
            }
        }
        let rates = try! #require(stepped)
        #expect(rates.best >= 29_000 && rates.now < 10_000)
        #expect(fallback.steppedBack)
        // A slow start of a new transfer is not a fall.
        var fresh = LinkFallback()
        for second in 0...30 { #expect(fresh.record(bytes: second * 2_000, at: .seconds(second)) == nil) }
    }
}
