@testable import Daemon
import Foundation
@testable import Machines
import Roles
@testable import Storage
import Testing
import Transfer

/// Every JSON event held against docs/json-events.md: each field emitted is documented with
/// its JSON type, each field documented as required is emitted, and every documented event is
/// rendered here.
@Suite struct JSONEventContractTests {
    /// A decoded JSON value that keeps integers, numbers and booleans apart.
    indirect enum Value: Decodable {
        case string(String), integer(Int), number(Double), boolean(Bool), object([String: Value]), array([Value]), null

        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if container.decodeNil() { self = .null }
            else if let value = try? container.decode(Bool.self) { self = .boolean(value) }
            else if let value = try? container.decode(Int.self) { self = .integer(value) }
            else if let value = try? container.decode(Double.self) { self = .number(value) }
            else if let value = try? container.decode(String.self) { self = .string(value) }
            else if let value = try? container.decode([String: Value].self) { self = .object(value) }
            else { self = .array(try container.decode([Value].self)) }
        }

        func matches(_ type: String) -> Bool {
            switch (self, type) {
            case (.string, "string"), (.integer, "integer"), (.integer, "number"), (.number, "number"),
                 (.boolean, "boolean"), (.object, "object"), (.array, "array"): true
            default: false
            }
        }
    }

    struct Field { var type: String; var required: Bool }

    /// The reference: tables by name ("*" for every event, event names, object names).
    struct Reference {
        var events: [String: [String: Field]] = [:]
        var objects: [String: [String: Field]] = [:]

        init() throws {
            let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("docs/json-events.md")
            let text = try String(contentsOf: url, encoding: .utf8)
            var names: [String] = []
            var isObject = false
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix("#") {
                    names = line.matches(of: /`([^`]+)`/).map { String($0.1) }
                    isObject = line.contains("Object")
                    continue
                }
                guard line.hasPrefix("| `"), !names.isEmpty else { continue }
                let cells = line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) }
                guard cells.count >= 3, let name = cells[0].firstMatch(of: /^`([^`]+)`$/)?.1 else { continue }
                let field = Field(type: cells[1], required: cells[2] == "yes")
                for table in names {
                    if isObject { objects[table, default: [:]][String(name)] = field }
                    else { events[table, default: [:]][String(name)] = field }
                }
            }
        }
    }

    static let peer = PeerDescription(address: "AA:BB:CC:DD:EE:FF", name: "phone", rssi: -60)
    static let key = AuthenticatedPeer(keyLine: "bletransfer-x25519 AAAA host", fingerprint: "SHA256:abcd",
                                       name: "host")
    static let fullSummary = MessageSummary(sequence: 2, byteCount: 10, format: .compat, sha256: "00",
                                            duration: .milliseconds(1500), ordering: .atRisk(because: "EATT"),
                                            peerKey: key, fileName: "a.txt", resumedFrom: 4, payloadBytesOnAir: 12)
    static let plainSummary = MessageSummary(sequence: 1, byteCount: 1, format: .secure)

    /// Every event the program prints, with every optional field set and without.
    static var lines: [String] {
        let all = JSONEventExtras(elapsed: 1.5, base64: "aGk=", text: "hi", count: 3, rss: 4096)
        let progress = TransferProgress(bytesSoFar: 5, totalBytes: 10)
        let events: [RoleEvent] = [
            .stateChanged(from: .unknown, to: .poweredOn, detail: "adapter up"),
            .stateChanged(from: .poweredOn, to: .poweredOff, detail: nil),
            .advertising(adapter: "hci0", localName: "bletransfer"), .advertising(adapter: "hci0", localName: nil),
            .scanning(adapter: "hci0"),
            .peerFound(peer), .peerFound(PeerDescription(address: "AA:BB:CC:DD:EE:FF")),
            .connecting(peer, attempt: 2), .connected(peer),
            .subscribed(peer, mtu: 517, format: .secure, transport: .l2cap),
            .progress(peer, progress, bytesPerSecond: 100.5, secondsRemaining: 2),
            .progress(nil, TransferProgress(bytesSoFar: 5, totalBytes: nil), bytesPerSecond: nil, secondsRemaining: nil),
            .delivered(fullSummary, to: peer), .delivered(plainSummary, to: nil),
            .received(fullSummary, from: peer, storedAt: "/in/a.txt"), .received(plainSummary, from: nil, storedAt: nil),
            .transferAborted(peer, reason: "cut"), .transferAborted(nil, reason: "cut"),
            .centralDropped(peer, reason: "no ACK"),
            .retrying(reason: "busy", delay: .milliseconds(2500)),
            .disconnected(peer),
            .refused(peer, bound: "min-rate", reason: "slow", delay: .seconds(30)),
            .warning("careful"),
            .link(LinkReport(peer: "AA:BB:CC:DD:EE:FF", phy: "2M", intervalMilliseconds: 7.5, latency: 0,
                             supervisionTimeoutMilliseconds: 420, dataLength: 251, tuned: true)),
            .link(LinkReport(peer: "AA:BB:CC:DD:EE:FF", tuned: false,
                             limits: [.init(setting: "2M PHY", by: "privilege", detail: "needs CAP_NET_ADMIN")],
                             unreadable: "needs CAP_NET_RAW")),
        ]
        // What the commands add: `receive` its elapsed time to every event and the payload to
        // `received`, the daemon its count and memory to `delivered` and `received`.
        func extras(_ event: RoleEvent) -> JSONEventExtras {
            switch event {
            case .received: all
            case .delivered: JSONEventExtras(elapsed: all.elapsed, count: all.count, rss: all.rss)
            default: JSONEventExtras(elapsed: all.elapsed)
            }
        }
        var lines = events.flatMap { [EventRenderer.jsonLine(for: $0), EventRenderer.jsonLine(for: $0, extras: extras($0))] }
        lines += [
            JSONEvents.line("error", ErrorJSONEvent("no bus", kind: "unavailable", exitStatus: 69)),
            JSONEvents.line("error", { var event = ErrorJSONEvent("no adapter", kind: "unavailable", exitStatus: 69)
                                       event.hint = "plug one in"
                                       return event }()),
            JSONEvents.line("error", ErrorJSONEvent("cannot move", file: "a.txt")),
            JSONEvents.line("waiting", WaitingJSONEvent(kind: "permissionDenied", text: "denied",
                                                        retrySeconds: 5, advice: "sudo usermod")),
            JSONEvents.line("waiting", WaitingJSONEvent(kind: "unavailable", text: "no adapter", retrySeconds: 5,
                                                        hint: "plug one in")),
            JSONEvents.line("stopped", StoppedJSONEvent(reason: "finished", exitStatus: 0)),
            JSONEvents.line("stopped", StoppedJSONEvent(reason: "signal", exitStatus: 130, signal: "SIGINT")),
            JSONEvents.line("offering", OfferingJSONEvent(file: "a.txt", bytes: 3)),
            JSONEvents.line("sent", SentJSONEvent(file: "a.txt", path: "/out/sent/a.txt")),
            JSONEvents.line("sent", SentJSONEvent(file: "a.txt")),
            JSONEvents.line("failed", FailedJSONEvent(file: "a.txt", reason: "too big", path: "/out/failed/a.txt")),
            JSONEvents.line("failed", FailedJSONEvent(file: "a.txt", reason: "too big")),
        ]
        return lines
    }

    static func decode(_ line: String) throws -> [String: Value] {
        try JSONDecoder().decode([String: Value].self, from: Data(line.utf8))
    }

    static func check(_ object: [String: Value], against table: [String: Field], objects: [String: [String: Field]],
                      context: String) {
        for (name, value) in object {
            guard let field = table[name] else {
                Issue.record("\(context): field \(name) is not documented")
                continue
            }
            #expect(value.matches(field.type), "\(context): \(name) is \(value), documented as \(field.type)")
            if case .object(let nested) = value {
                guard let nestedTable = objects[name] else {
                    Issue.record("\(context): object \(name) has no table")
                    continue
                }
                check(nested, against: nestedTable, objects: objects, context: "\(context).\(name)")
            }
        }
        for (name, field) in table where field.required && object[name] == nil {
            Issue.record("\(context): required field \(name) is missing")
        }
    }

    @Test func everyEventMatchesTheReference() throws {
        let reference = try Reference()
        let common = try #require(reference.events["*"])
        #expect(common["schema"]?.required == true && common["time"]?.required == true)
        var seen: Set<String> = []
        for line in Self.lines {
            let object = try Self.decode(line)
            guard case .string(let name)? = object["event"] else {
                Issue.record("no event name in \(line)")
                continue
            }
            seen.insert(name)
            guard let own = reference.events[name] else {
                Issue.record("event \(name) is not documented")
                continue
            }
            let table = common.merging(own) { _, event in event }
            Self.check(object, against: table, objects: reference.objects, context: name)
        }
        #expect(seen == Set(reference.events.keys).subtracting(["*"]))
        #expect(seen.count == 23)
    }

    @Test func everyEventCarriesTheSchemaAndAMillisecondTime() throws {
        let date = Date(timeIntervalSince1970: 1_795_685_352.125)
        let line = EventRenderer.jsonLine(for: .warning("w"), date: date)
        let object = try Self.decode(line)
        guard case .string(let time)? = object["time"], case .integer(2)? = object["schema"],
              case .number(let unix)? = object["unixTime"]
        else {
            Issue.record("envelope missing: \(line)")
            return
        }
        #expect(time == "2026-11-26T09:29:12.125Z")
        #expect(abs(unix - 1_795_685_352.125) < 0.0005)
        #expect(EventTimestamp.string(for: Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        for line in Self.lines {
            let object = try Self.decode(line)
            guard case .string(let time)? = object["time"] else {
                Issue.record("no time in \(line)")
                continue
            }
            #expect(time.wholeMatch(of: /\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z/) != nil)
        }
    }

    /// `message` is one type across events (an object: `delivered`, `received`); the text of
    /// `warning`, `error` and `waiting` is `text` alone (schema 2).
    @Test func messageIsAlwaysTheMessageObject() throws {
        for line in Self.lines {
            let object = try Self.decode(line)
            if let message = object["message"], case .object = message { continue }
            #expect(object["message"] == nil, "\(line)")
        }
    }

    /// Every `kind` an `error` or `waiting` event can carry is listed in the contract.
    @Test func everyKindIsListed() throws {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/json-events.md")
        let text = try String(contentsOf: url, encoding: .utf8)
        for kind in FailureKind.allCases {
            #expect(text.contains("| `\(kind.rawValue)` |"), "kind \(kind.rawValue) is not listed")
        }
    }

    @Test func progressLinesStartWithTheirBytes() {
        // Scripts match `^{"bytes":N,...,"event":"progress"`: keys stay sorted.
        let line = EventRenderer.jsonLine(for: .progress(Self.peer, TransferProgress(bytesSoFar: 7, totalBytes: 9),
                                                         bytesPerSecond: 1, secondsRemaining: 1),
                                          extras: JSONEventExtras(elapsed: 1))
        #expect(line.wholeMatch(of: /\{"bytes":7,.*"event":"progress".*"total":9.*\}/) != nil)
        #expect(!line.contains("\n"))
    }
}
