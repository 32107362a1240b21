import Trust

/// Who this host is and whom it exchanges messages with in framed version 2's secure mode
/// (docs/wire-v2.md): a Noise XX handshake with both static keys, then encrypted records.
///
/// `requiresSecure` is the policy of a side that was given authorized peers (interactive roles)
/// and of every daemon unless `--insecure-any-peer`: a peer that does not complete the secure
/// mode — Apple's flow, version 1, version 2 without `secure`, an unlisted key — gets and gives
/// nothing. Without it, peers that offer the secure mode get it and the others are served as
/// before.
public struct SecureModePolicy: Sendable {
    public var identity: HostIdentity
    public var authorizedPeers: AuthorizedPeers
    public var requiresSecure: Bool

    public init(identity: HostIdentity, authorizedPeers: AuthorizedPeers, requiresSecure: Bool) {
        self.identity = identity
        self.authorizedPeers = authorizedPeers
        self.requiresSecure = requiresSecure
    }
}

/// The peer a secure session authenticated: its listed key and the name the authorized-peers
/// file gives it. Carried by events and stored with each received file.
public struct AuthenticatedPeer: Sendable, Hashable {
    /// The public key line (`bletransfer-x25519 <base64> [name]`).
    public var keyLine: String
    /// `SHA256:xxxx-…`, as `bletransfer id` prints it.
    public var fingerprint: String
    /// The name after the key in the authorized-peers file, if any.
    public var name: String?

    public init(keyLine: String, fingerprint: String, name: String?) {
        self.keyLine = keyLine
        self.fingerprint = fingerprint
        self.name = name
    }

    public init(_ peer: AuthorizedPeers.Peer) {
        self.init(keyLine: peer.key.line(name: peer.name), fingerprint: peer.key.fingerprint, name: peer.name)
    }
}
