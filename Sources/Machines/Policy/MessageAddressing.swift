import Transfer
import Trust

extension OutgoingMessage {
    /// Whether `peer` may be given this message: any peer for a message without an addressee;
    /// otherwise only a listed peer whose name or fingerprint is the addressee.
    package func isAddressed(to peer: AuthenticatedPeer?) -> Bool {
        guard let addressee else { return true }
        guard let peer, peer.isListed else { return false }
        return peer.isNamed(addressee)
    }
}

extension AuthenticatedPeer {
    /// Whether `addressee` (an outbox folder, `send --to`) names this peer: its name in the
    /// authorized-peers file, or its fingerprint.
    package func isNamed(_ addressee: String) -> Bool {
        name == addressee || fingerprint == addressee
    }
}

extension AuthorizedPeers {
    /// The peers `message` may go to: all of them for a message without an addressee;
    /// otherwise only the listed peers its addressee names, and no unlisted key.
    package func allowed(for message: OutgoingMessage) -> AuthorizedPeers {
        guard let addressee = message.addressee else { return self }
        let keys = peers.filter { AuthenticatedPeer($0).isNamed(addressee) }.map(\.key)
        return restricted(to: Set(keys))
    }
}
