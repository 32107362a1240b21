import Transfer

package struct PeerDescription: Sendable, Equatable {
    /// Bluetooth address, "AA:BB:CC:DD:EE:FF".
    package var address: String
    /// Advertised local name or BlueZ alias, when known.
    package var name: String?
    /// Signal strength at discovery, in dBm.
    package var rssi: Int?

    package init(address: String, name: String? = nil, rssi: Int? = nil) {
        self.address = address
        self.name = name
        self.rssi = rssi
    }
}

/// How a subscription's values travel: GATT through bluetoothd, or an LE credit-based L2CAP
/// channel between the applications (`channel`, docs/wire-v2.md section 6).
package enum TransferTransport: String, Sendable, Equatable {
    case gatt
    case l2cap
}

/// Everything a role reports while it runs: progress on a TTY, JSON lines with `--json`, or log lines in daemon mode.
package enum RoleEvent: Sendable {
    /// The CoreBluetooth-style manager state changed; `detail` says why, in words.
    case stateChanged(from: ManagerState, to: ManagerState, detail: String?)
    /// Peripheral: the GATT application and advertisement are registered.
    case advertising(adapter: String, localName: String?)
    /// Central: discovery started with the transfer-service filter.
    case scanning(adapter: String)
    case peerFound(PeerDescription)
    case connecting(PeerDescription, attempt: Int)
    case connected(PeerDescription)
    /// A central subscribed (peripheral) or we did (central); `mtu`: the ATT or L2CAP MTU, the longest value.
    case subscribed(PeerDescription, mtu: Int, format: TransferFormat, transport: TransferTransport = .gatt)
    case progress(PeerDescription?, TransferProgress, bytesPerSecond: Double?, secondsRemaining: Double?)
    /// Peripheral: a message was delivered (framed: acknowledged; compat: unsubscribed after `EOM`).
    case delivered(MessageSummary, to: PeerDescription?)
    /// Central: a complete, verified message was received and handed to the sink.
    case received(MessageSummary, from: PeerDescription?, storedAt: String?)
    /// A transfer stopped before its end; nothing of it was counted or written.
    case transferAborted(PeerDescription?, reason: String)
    /// Peripheral: a central missed a bound (no ACK, no unsubscription, too slow) and was dropped.
    case centralDropped(PeerDescription, reason: String)
    case retrying(reason: String, delay: Duration)
    case disconnected(PeerDescription)
    /// A bound refused a peer: `bound` names the option ("min-rate", "reserve", "quota-bytes", "quota-files"),
    /// `reason` says why. The peer backs off for `delay`; nothing was kept, and its sender keeps the message.
    case refused(PeerDescription, bound: String, reason: String, delay: Duration)
    /// Something worth telling the user that does not stop the role.
    case warning(String)
    /// The LE link under the role and what holds it back (from the link watch beside the role).
    case link(LinkReport)
}

package struct MessageSummary: Sendable, Equatable {
    /// 1 for the first message of this run.
    package var sequence: Int
    package var byteCount: Int
    package var format: TransferFormat
    /// Lower-case hex SHA-256 of the payload, when the format carries it.
    package var sha256: String?
    /// How long the transfer took, first data value to `EOM`.
    package var duration: Duration?
    /// Compat on a link with (maybe) several ATT bearers (EATT): the values' order is at risk.
    package var ordering: CompatOrdering?
    /// The peer the handshake authenticated (sender of a received message, receiver of a delivered one).
    package var peerKey: AuthenticatedPeer?
    /// The file name the sender gave (`meta`), as sent: hostile until escaped (`SafeText`) or JSON-encoded.
    package var fileName: String?
    /// Resume: the offset the message continued from (nil: from byte 0).
    package var resumedFrom: Int?
    /// Sender: payload bytes notified for the message in all its visits (skipped ranges not).
    package var payloadBytesOnAir: Int?

    package init(sequence: Int, byteCount: Int, format: TransferFormat, sha256: String? = nil, duration: Duration? = nil,
                ordering: CompatOrdering? = nil, peerKey: AuthenticatedPeer? = nil, fileName: String? = nil,
                resumedFrom: Int? = nil, payloadBytesOnAir: Int? = nil) {
        self.resumedFrom = resumedFrom
        self.payloadBytesOnAir = payloadBytesOnAir
        self.peerKey = peerKey
        self.fileName = fileName
        self.sequence = sequence
        self.byteCount = byteCount
        self.format = format
        self.sha256 = sha256
        self.duration = duration
        self.ordering = ordering
    }
}

/// Apple's flow (compat) has no sequence numbers, and with Enhanced ATT BlueZ 5.66 spreads one characteristic's
/// notifications over bearers that can overtake each other (scripts/lab/README.md, "Ordering on stock BlueZ").
package enum CompatOrdering: Sendable, Equatable {
    /// The link has (or may have) several ATT bearers and Apple's flow cannot put values back
    /// in order: the bytes may not have arrived in the order sent.
    case atRisk(because: String)

    package var reason: String {
        switch self { case .atRisk(let because): because }
    }
}

package enum EventText {
    package static func describe(_ peer: PeerDescription) -> String {
        if let name = peer.name, !name.isEmpty, name != peer.address { return "\(peer.address) (\(name))" }
        return peer.address
    }

    /// Said once per run when an unlisted key was let in: encrypted, but nobody authenticated.
    package static func unauthenticatedNotice(peer: String, key: AuthenticatedPeer) -> String {
        "encrypted but not authenticated: \(peer)'s key is \(key.fingerprint) (no authorized peers here); "
            + "to trust only that host, run 'bletransfer pair' on both hosts (or compare the key with "
            + "'bletransfer id' there and 'bletransfer peers add' its line)"
    }
}
