import Foundation
import Machines
import Roles
import Transfer

/// The `--json` contract (docs/json-events.md): one `Encodable` type per event, each line a JSON object with sorted
/// keys carrying `event`, `schema`, `time` and `unixTime` beside the event's own fields.
///
/// `schema` changes only when a field is removed, renamed or changes type or meaning; new fields and new events keep
/// it.
package enum JSONEvents {
    package static let schema = 2

    /// One event as a line: the envelope's fields and the payload's, merged into one object.
    package static func line(_ event: String, _ payload: some Encodable, extras: JSONEventExtras = JSONEventExtras(),
                            date: Date = Date()) -> String {
        let envelope = JSONEventEnvelope(event: event, schema: schema, time: EventTimestamp.string(for: date),
                                         unixTime: (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000)
        guard let data = try? JSONEncoder.sortedKeys.encode(JSONEventLine(envelope: envelope, extras: extras, payload: payload)),
              let text = String(data: data, encoding: .utf8)
        else {
            return #"{"event":"error","schema":2,"text":"event could not be encoded"}"#
        }
        return EventRenderer.jsonEscapingTerminalControls(text)
    }
}

extension JSONEncoder {
    /// The encoder of every JSON line the tool prints: sorted keys, slashes as they are.
    package static var sortedKeys: JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }
}

struct JSONEventEnvelope: Encodable {
    var event: String
    var schema: Int
    /// ISO 8601, UTC, milliseconds.
    var time: String
    /// The same instant in seconds since 1970, to the millisecond (truncated, as `time` is).
    var unixTime: Double
}

/// Fields a command adds to some events: `receive` (elapsed, the payload), the daemon (message count, resident memory).
package struct JSONEventExtras: Encodable, Sendable {
    /// Seconds since the command started.
    package var elapsed: Double?
    /// `received` on standard output: the payload, base64.
    package var base64: String?
    /// `received` on standard output: the payload, when it is UTF-8.
    package var text: String?
    /// Daemon: messages moved since it started.
    package var count: Int?
    /// Daemon: resident memory in bytes.
    package var rss: Int?

    package init(elapsed: Double? = nil, base64: String? = nil, text: String? = nil, count: Int? = nil, rss: Int? = nil) {
        self.elapsed = elapsed
        self.base64 = base64
        self.text = text
        self.count = count
        self.rss = rss
    }
}

/// Envelope, extras and payload in one keyed container (JSONEncoder merges containers asked for at one level).
struct JSONEventLine<Payload: Encodable>: Encodable {
    var envelope: JSONEventEnvelope
    var extras: JSONEventExtras
    var payload: Payload

    func encode(to encoder: any Encoder) throws {
        try envelope.encode(to: encoder)
        try extras.encode(to: encoder)
        try payload.encode(to: encoder)
    }
}

// MARK: Shared objects

package struct JSONPeer: Encodable, Sendable {
    package var address: String
    package var name: String?
    package var rssi: Int?

    init(_ peer: PeerDescription) {
        address = peer.address
        name = peer.name
        rssi = peer.rssi
    }

    static func optional(_ peer: PeerDescription?) -> Self? { peer.map(Self.init) }
}

package struct JSONMessage: Encodable, Sendable {
    package var sequence: Int
    package var bytes: Int
    package var format: String
    package var sha256: String?
    package var seconds: Double?
    package var orderAtRisk: Bool?
    package var orderRisk: String?

    init(_ summary: MessageSummary) {
        sequence = summary.sequence
        bytes = summary.byteCount
        format = summary.format.rawValue
        sha256 = summary.sha256
        seconds = summary.duration?.seconds
        if let ordering = summary.ordering {
            orderAtRisk = true
            orderRisk = ordering.reason
        }
    }
}

package struct JSONPeerKey: Encodable, Sendable {
    package var key: String
    package var fingerprint: String
    package var authenticated: Bool
    package var name: String?

    init(_ key: AuthenticatedPeer) {
        self.key = key.keyLine
        fingerprint = key.fingerprint
        authenticated = key.isListed
        name = key.name
    }
}

// MARK: Role events

package struct StateJSONEvent: Encodable, Sendable {
    package var from: String
    package var state: String
    package var detail: String?
}

package struct AdvertisingJSONEvent: Encodable, Sendable {
    package var adapter: String
    package var localName: String?
}

package struct ScanningJSONEvent: Encodable, Sendable {
    package var adapter: String
}

/// `found`, `connected`, `disconnected`.
package struct PeerJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer
}

package struct ConnectingJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer
    package var attempt: Int
}

package struct SubscribedJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer
    package var mtu: Int
    package var format: String
    package var transport: String
}

package struct ProgressJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer?
    package var bytes: Int
    package var total: Int?
    package var bytesPerSecond: Double?
    package var secondsRemaining: Double?
}

package struct DeliveredJSONEvent: Encodable, Sendable {
    package var message: JSONMessage
    package var peer: JSONPeer?
    package var receiver: JSONPeerKey?
    package var resumedFrom: Int?
    package var payloadBytesOnAir: Int?
}

package struct ReceivedJSONEvent: Encodable, Sendable {
    package var message: JSONMessage
    package var peer: JSONPeer?
    package var sender: JSONPeerKey?
    package var resumedFrom: Int?
    /// The file name as sent: JSON escapes it; compare with `path` to see the renaming.
    package var name: String?
    package var path: String?
}

/// `aborted`, `central-dropped`.
package struct ReasonJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer?
    package var reason: String
}

package struct RetryingJSONEvent: Encodable, Sendable {
    package var reason: String
    package var retrySeconds: Double
}

package struct RefusedJSONEvent: Encodable, Sendable {
    package var peer: JSONPeer
    package var bound: String
    package var reason: String
    package var retrySeconds: Double
}

/// `warning`: the words in `text`, the name every text-carrying event uses (`message` is the
/// message object of `delivered` and `received`, one type across events since schema 2).
package struct WarningJSONEvent: Encodable, Sendable {
    package var text: String

    package init(_ text: String) { self.text = text }
}

/// `link`: what the role's link runs at (nil fields: unreadable here, `unreadable` says why) and what limits each.
package struct LinkJSONEvent: Encodable, Sendable {
    package var peer: String?
    package var phy: String?
    package var intervalMs: Double?
    package var latency: Int?
    package var supervisionTimeoutMs: Int?
    package var dataLength: Int?
    package var summary: String
    package var tuned: Bool
    package var limits: [Limit]
    package var unreadable: String?

    package struct Limit: Encodable, Sendable {
        package var setting: String
        package var by: String
        package var detail: String
    }

    init(_ report: LinkReport) {
        peer = report.peer
        phy = report.phy
        intervalMs = report.intervalMilliseconds
        latency = report.latency
        supervisionTimeoutMs = report.supervisionTimeoutMilliseconds
        dataLength = report.dataLength
        summary = report.summary
        tuned = report.tuned
        limits = report.limits.map { Limit(setting: $0.setting, by: $0.by, detail: $0.detail) }
        unreadable = report.unreadable
    }
}

// MARK: Command and daemon events

/// `error`: a command's failure (`kind`, `exitStatus`) or the daemon's (`file`).
package struct ErrorJSONEvent: Encodable, Sendable {
    package var text: String
    package var kind: String?
    package var exitStatus: Int?
    package var file: String?
    /// Command: what to do about it, as the `hint:` line says.
    package var hint: String?

    package init(_ text: String, kind: String? = nil, exitStatus: Int? = nil, file: String? = nil) {
        self.text = text
        self.kind = kind
        self.exitStatus = exitStatus
        self.file = file
    }
}

package struct OfferingJSONEvent: Encodable, Sendable {
    package var file: String
    package var bytes: Int
}

package struct SentJSONEvent: Encodable, Sendable {
    package var file: String
    package var path: String?
}

package struct FailedJSONEvent: Encodable, Sendable {
    package var file: String
    package var reason: String
    package var path: String?
}

package struct WaitingJSONEvent: Encodable, Sendable {
    package var kind: String
    package var text: String
    package var retrySeconds: Double
    package var advice: String?
    /// What to do about it, as `bletransfer status` says (Bluetooth unavailable).
    package var hint: String?
}

/// `stopped`: ended without a failure: work finished, or stopped by a signal (`signal`, and the exit status).
package struct StoppedJSONEvent: Encodable, Sendable {
    /// `finished` or `signal`.
    package var reason: String
    package var exitStatus: Int
    /// `SIGINT` or `SIGTERM`, for `reason` `signal`.
    package var signal: String?

    package init(reason: String, exitStatus: Int, signal: String? = nil) {
        self.reason = reason
        self.exitStatus = exitStatus
        self.signal = signal
    }

    package static func signalName(_ number: Int32) -> String {
        number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "signal \(number)"
    }
}

// MARK: RoleEvent → line

extension EventRenderer {
    package static func jsonName(for event: RoleEvent) -> String {
        switch event {
        case .stateChanged: "state"
        case .advertising: "advertising"
        case .scanning: "scanning"
        case .peerFound: "found"
        case .connecting: "connecting"
        case .connected: "connected"
        case .subscribed: "subscribed"
        case .progress: "progress"
        case .delivered: "delivered"
        case .received: "received"
        case .transferAborted: "aborted"
        case .centralDropped: "central-dropped"
        case .retrying: "retrying"
        case .disconnected: "disconnected"
        case .refused: "refused"
        case .warning: "warning"
        case .link: "link"
        }
    }

    /// The event as one JSON line (docs/json-events.md).
    package static func jsonLine(for event: RoleEvent, extras: JSONEventExtras = JSONEventExtras(),
                                date: Date = Date()) -> String {
        let name = jsonName(for: event)
        func line(_ payload: some Encodable) -> String { JSONEvents.line(name, payload, extras: extras, date: date) }
        switch event {
        case .stateChanged(let from, let to, let detail):
            return line(StateJSONEvent(from: from.rawValue, state: to.rawValue, detail: detail))
        case .advertising(let adapter, let localName):
            return line(AdvertisingJSONEvent(adapter: adapter, localName: localName))
        case .scanning(let adapter): return line(ScanningJSONEvent(adapter: adapter))
        case .peerFound(let peer), .connected(let peer), .disconnected(let peer):
            return line(PeerJSONEvent(peer: JSONPeer(peer)))
        case .connecting(let peer, let attempt):
            return line(ConnectingJSONEvent(peer: JSONPeer(peer), attempt: attempt))
        case .subscribed(let peer, let mtu, let format, let transport):
            return line(SubscribedJSONEvent(peer: JSONPeer(peer), mtu: mtu, format: format.rawValue,
                                            transport: transport.rawValue))
        case .progress(let peer, let progress, let rate, let remaining):
            return line(ProgressJSONEvent(peer: .optional(peer), bytes: progress.bytesSoFar, total: progress.totalBytes,
                                          bytesPerSecond: rate, secondsRemaining: remaining))
        case .delivered(let summary, let peer):
            return line(DeliveredJSONEvent(message: JSONMessage(summary), peer: .optional(peer),
                                           receiver: summary.peerKey.map(JSONPeerKey.init),
                                           resumedFrom: summary.resumedFrom, payloadBytesOnAir: summary.payloadBytesOnAir))
        case .received(let summary, let peer, let storedAt):
            return line(ReceivedJSONEvent(message: JSONMessage(summary), peer: .optional(peer),
                                          sender: summary.peerKey.map(JSONPeerKey.init), resumedFrom: summary.resumedFrom,
                                          name: summary.fileName, path: storedAt))
        case .transferAborted(let peer, let reason): return line(ReasonJSONEvent(peer: .optional(peer), reason: reason))
        case .centralDropped(let peer, let reason): return line(ReasonJSONEvent(peer: JSONPeer(peer), reason: reason))
        case .retrying(let reason, let delay):
            return line(RetryingJSONEvent(reason: reason, retrySeconds: delay.seconds))
        case .refused(let peer, let bound, let reason, let delay):
            return line(RefusedJSONEvent(peer: JSONPeer(peer), bound: bound, reason: reason, retrySeconds: delay.seconds))
        case .warning(let text): return line(WarningJSONEvent(text))
        case .link(let report): return line(LinkJSONEvent(report))
        }
    }
}
