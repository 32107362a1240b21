import Trust

/// The peer a secure session authenticated: key and name, carried by events and stored with files.
package struct AuthenticatedPeer: Sendable, Hashable {
    /// The public key line (`bletransfer-x25519 <base64> [name]`).
    package var keyLine: String
    /// `SHA256:` and the key's whole SHA-256 in base64, as `bletransfer id` prints it.
    package var fingerprint: String
    /// The name after the key in the authorized-peers file, if any.
    package var name: String?
    /// Listed in this host's authorized peers. False: encrypted with it, but nothing says whose it is.
    package var isListed: Bool

    package init(keyLine: String, fingerprint: String, name: String?, isListed: Bool = true) {
        self.keyLine = keyLine
        self.fingerprint = fingerprint
        self.name = name
        self.isListed = isListed
    }

    package init(_ peer: AuthorizedPeers.Peer) {
        self.init(keyLine: peer.key.line(name: peer.name), fingerprint: peer.key.fingerprint, name: peer.name,
                  isListed: peer.isListed)
    }
}
