import Trust

/// Who this host is and whom it exchanges messages with in the framed protocol
/// (docs/wire-v2.md): always a Noise XX handshake with both static keys, then encrypted records.
///
/// `requiresSecure` is the policy of a side that was given authorized peers (interactive roles)
/// and of every daemon unless `--insecure-any-peer`: a peer that does not complete the framed
/// protocol with a listed key — Apple's flow, an unlisted key — gets and gives nothing. Without
/// it, Apple-flow peers are served in clear (their format cannot be encrypted).
///
/// `unauthenticated()` is the policy of a host without keys: a key made for the run, any peer's
/// key let in (`AuthorizedPeers.anyKey`). A passive listener sees nothing of such a transfer; an
/// active man in the middle could, which is what authorized peers are for.
package struct SecureModePolicy: Sendable {
    package var identity: HostIdentity
    package var requiresSecure: Bool
    /// A fixed list, or nil when `source` says.
    private var fixedPeers: AuthorizedPeers
    private var source: AuthorizedPeersSource?

    /// The peers a session that starts now checks keys against: the file as it is now when the policy was made from
    /// one (`init(identity:authorizedPeersSource:requiresSecure:)`). Setting it fixes the list.
    package var authorizedPeers: AuthorizedPeers {
        get { source?.current() ?? fixedPeers }
        set {
            fixedPeers = newValue
            source = nil
        }
    }

    package init(identity: HostIdentity, authorizedPeers: AuthorizedPeers, requiresSecure: Bool) {
        self.identity = identity
        // Not required: listed keys are named, any other key is let in unauthenticated.
        self.fixedPeers = requiresSecure ? authorizedPeers : authorizedPeers.acceptingAnyKey()
        self.requiresSecure = requiresSecure
    }

    /// The peers the authorized-peers file at `path` lists, re-read when it changes
    /// (`AuthorizedPeersSource`). Throws when the file cannot be loaded now.
    ///
    /// `restrictedTo`: only these listed keys (`send --to`, `receive --from`); the policy then
    /// requires them whatever `requiresSecure` says.
    package init(identity: HostIdentity, authorizedPeersPath path: String, requiresSecure: Bool,
                restrictedTo restriction: Set<PeerKey>? = nil) throws(TrustError) {
        let requiresSecure = requiresSecure || restriction != nil
        let source = try AuthorizedPeersSource(path: path, acceptsAnyKey: !requiresSecure, restrictedTo: restriction)
        self.identity = identity
        self.fixedPeers = source.current()
        self.requiresSecure = requiresSecure
        self.source = source
    }

    /// No keys given: a fresh key for this run, any peer's key accepted, Apple's flow allowed.
    package static func unauthenticated() -> SecureModePolicy {
        SecureModePolicy(identity: HostIdentity(), authorizedPeers: .anyKey, requiresSecure: false)
    }
}
