import Trust

extension AuthorizedPeers {
    /// An authorized-peers file listing `identities` by their names, one a line from line 1.
    package static func listing(_ identities: HostIdentity...) -> AuthorizedPeers {
        AuthorizedPeers(identities.enumerated().map { index, identity in
            AuthorizedPeers.Peer(key: identity.publicKey, name: identity.name, line: index + 1)
        })
    }

    package func isAuthorized(_ key: PeerKey) -> Bool { peer(for: key) != nil }
}
