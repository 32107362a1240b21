import Transfer
import Trust

extension OutgoingMessage {
    /// `peer` may have this message: any, without an addressee; else a listed peer it names.
    package func isAddressed(to peer: AuthenticatedPeer?) -> Bool {
        guard let addressee else { return true }
        guard let peer, peer.isListed else { return false }
        return peer.isNamed(addressee)
    }
}

extension AuthenticatedPeer {
    /// `addressee` (outbox folder, `send --to`) is this peer's listed name or its fingerprint.
    package func isNamed(_ addressee: String) -> Bool {
        name == addressee || fingerprint == addressee
    }
}

extension AuthorizedPeers {
    /// The peers `message` may go to: all, without an addressee; else the listed ones it names.
    package func allowed(for message: OutgoingMessage) -> AuthorizedPeers {
        guard let addressee = message.addressee else { return self }
        let keys = peers.filter { AuthenticatedPeer($0).isNamed(addressee) }.map(\.key)
        return restricted(to: Set(keys))
    }
}
