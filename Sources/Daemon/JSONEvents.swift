import Foundation
import Machines
import Roles
import Transfer

/// The `--json` contract (docs/json-events.md): one `Encodable` type per event, each line a
/// JSON object with sorted keys carrying `event`, `schema`, `time` and `unixTime` beside the
/// event's own fields.
///
/// `schema` changes only when a field is removed, renamed or changes type or meaning; new
/// fields and new events keep it.
public enum JSONEvents {
    public static let schema = 2

    /// One event as a line: the envelope's fields and the payload's, merged into one object.
    public static func line(_ event: String, _ payload: some Encodable, extras: JSONEventExtras = JSONEventExtras(),
                            date: Date = Date()) -> String {
        let envelope = JSONEventEnvelope(event: event, schema: schema, time: EventTimestamp.string(for: date),
                                         unixTime: (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(JSONEventLine(envelope: envelope, extras: extras, payload: payload)),
              let text = String(data: data, encoding: .utf8)
        else {
            return #"{"event":"error","schema":2,"text":"event could not be encoded"}"#
        }
        return EventRenderer.jsonEscapingTerminalControls(text)
    }
}

/// What every event carries.
struct JSONEventEnvelope: Encodable {
    var event: String
    var schema: Int
    /// ISO 8601, UTC, milliseconds.
    var time: String
    /// The same instant in seconds since 1970, to the millisecond (truncated, as `time` is).
    var unixTime: Double
}

/// Fields a command adds to some events: `receive` (elapsed, the payload) and the daemon
/// (message count, resident memory).
public struct JSONEventExtras: Encodable, Sendable {
    /// Seconds since the command started.
    public var elapsed: Double?
    /// `received` on standard output: the payload, base64.
    public var base64: String?
    /// `received` on standard output: the payload, when it is UTF-8.
    public var text: String?
    /// Daemon: messages moved since it started.
    public var count: Int?
    /// Daemon: resident memory in bytes.
    public var rss: Int?

    public init(elapsed: Double? = nil, base64: String? = nil, text: String? = nil, count: Int? = nil, rss: Int? = nil) {
        self.elapsed = elapsed
        self.base64 = base64
        self.text = text
        self.count = count
        self.rss = rss
    }
}

/// Envelope, extras and payload encoded into one keyed container (JSONEncoder merges the
/// containers the three ask for at the same level).
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

public struct JSONPeer: Encodable, Sendable {
    public var address: String
    public var name: String?
    public var rssi: Int?

    init(_ peer: PeerDescription) {
        address = peer.address
        name = peer.name
        rssi = peer.rssi
    }

    static func optional(_ peer: PeerDescription?) -> Self? { peer.map(Self.init) }
}

public struct JSONMessage: Encodable, Sendable {
    public var sequence: Int
    public var bytes: Int
    public var format: String
    public var sha256: String?
    public var seconds: Double?
    public var orderAtRisk: Bool?
    public var orderRisk: String?

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

public struct JSONPeerKey: Encodable, Sendable {
    public var key: String
    public var fingerprint: String
    public var authenticated: Bool
    public var name: String?

    init(_ key: AuthenticatedPeer) {
        self.key = key.keyLine
        fingerprint = key.fingerprint
        authenticated = key.isListed
        name = key.name
    }
}

// MARK: Role events

public struct StateJSONEvent: Encodable, Sendable {
    public var from: String
    public var state: String
    public var detail: String?
}

public struct AdvertisingJSONEvent: Encodable, Sendable {
    public var adapter: String
    public var localName: String?
}

public struct ScanningJSONEvent: Encodable, Sendable {
    public var adapter: String
}

/// `found`, `connected`, `disconnected`.
public struct PeerJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer
}

public struct ConnectingJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer
    public var attempt: Int
}

public struct SubscribedJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer
    public var mtu: Int
    public var format: String
    public var transport: String
}

public struct ProgressJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer?
    public var bytes: Int
    public var total: Int?
    public var bytesPerSecond: Double?
    public var secondsRemaining: Double?
}

public struct DeliveredJSONEvent: Encodable, Sendable {
    public var message: JSONMessage
    public var peer: JSONPeer?
    public var receiver: JSONPeerKey?
    public var resumedFrom: Int?
    public var payloadBytesOnAir: Int?
}

public struct ReceivedJSONEvent: Encodable, Sendable {
    public var message: JSONMessage
    public var peer: JSONPeer?
    public var sender: JSONPeerKey?
    public var resumedFrom: Int?
    /// The file name as sent: JSON escapes it; compare with `path` to see the renaming.
    public var name: String?
    public var path: String?
}

/// `aborted`, `central-dropped`.
public struct ReasonJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer?
    public var reason: String
}

public struct RetryingJSONEvent: Encodable, Sendable {
    public var reason: String
    public var retrySeconds: Double
}

public struct RefusedJSONEvent: Encodable, Sendable {
    public var peer: JSONPeer
    public var bound: String
    public var reason: String
    public var retrySeconds: Double
}

/// `warning`: the words in `text`, the name every text-carrying event uses (`message` is the
/// message object of `delivered` and `received`, one type across events since schema 2).
public struct WarningJSONEvent: Encodable, Sendable {
    public var text: String

    public init(_ text: String) {
        self.text = text
    }
}

// MARK: Command and daemon events

/// `error`: a command's failure (`kind`, `exitStatus`) or the daemon's (`file`).
public struct ErrorJSONEvent: Encodable, Sendable {
    public var text: String
    public var kind: String?
    public var exitStatus: Int?
    public var file: String?
    /// Command: what to do about it, as the `hint:` line says.
    public var hint: String?

    public init(_ text: String, kind: String? = nil, exitStatus: Int? = nil, file: String? = nil) {
        self.text = text
        self.kind = kind
        self.exitStatus = exitStatus
        self.file = file
    }
}

public struct OfferingJSONEvent: Encodable, Sendable {
    public var file: String
    public var bytes: Int
}

public struct SentJSONEvent: Encodable, Sendable {
    public var file: String
    public var path: String?
}

public struct FailedJSONEvent: Encodable, Sendable {
    public var file: String
    public var reason: String
    public var path: String?
}

public struct WaitingJSONEvent: Encodable, Sendable {
    public var kind: String
    public var text: String
    public var retrySeconds: Double
    public var advice: String?
    /// What to do about it, as `bletransfer status` says (Bluetooth unavailable).
    public var hint: String?

    public init(kind: String, text: String, retrySeconds: Double, advice: String? = nil, hint: String? = nil) {
        self.kind = kind
        self.text = text
        self.retrySeconds = retrySeconds
        self.advice = advice
        self.hint = hint
    }
}

/// `stopped`: the command or daemon ended without a failure: finished its work, or stopped
/// by a signal (`signal`, and the status it exits with).
public struct StoppedJSONEvent: Encodable, Sendable {
    /// `finished` or `signal`.
    public var reason: String
    public var exitStatus: Int
    /// `SIGINT` or `SIGTERM`, for `reason` `signal`.
    public var signal: String?

    public init(reason: String, exitStatus: Int, signal: String? = nil) {
        self.reason = reason
        self.exitStatus = exitStatus
        self.signal = signal
    }

    public static func signalName(_ number: Int32) -> String {
        number == SIGINT ? "SIGINT" : number == SIGTERM ? "SIGTERM" : "signal \(number)"
    }
}

// MARK: RoleEvent → line

extension EventRenderer {
    /// The event's name in JSON (`event`).
    public static func jsonName(for event: RoleEvent) -> String {
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
        }
    }

    /// The event as one JSON line (docs/json-events.md).
    public static func jsonLine(for event: RoleEvent, extras: JSONEventExtras = JSONEventExtras(),
                                date: Date = Date()) -> String {
        let name = jsonName(for: event)
        func line(_ payload: some Encodable) -> String {
            JSONEvents.line(name, payload, extras: extras, date: date)
        }
        switch event {
        case .stateChanged(let from, let to, let detail):
            return line(StateJSONEvent(from: from.rawValue, state: to.rawValue, detail: detail))
        case .advertising(let adapter, let localName):
            return line(AdvertisingJSONEvent(adapter: adapter, localName: localName))
        case .scanning(let adapter):
            return line(ScanningJSONEvent(adapter: adapter))
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
        case .transferAborted(let peer, let reason):
            return line(ReasonJSONEvent(peer: .optional(peer), reason: reason))
        case .centralDropped(let peer, let reason):
            return line(ReasonJSONEvent(peer: JSONPeer(peer), reason: reason))
        case .retrying(let reason, let delay):
            return line(RetryingJSONEvent(reason: reason, retrySeconds: delay.seconds))
        case .refused(let peer, let bound, let reason, let delay):
            return line(RefusedJSONEvent(peer: JSONPeer(peer), bound: bound, reason: reason, retrySeconds: delay.seconds))
        case .warning(let text):
            return line(WarningJSONEvent(text))
        }
    }
}
