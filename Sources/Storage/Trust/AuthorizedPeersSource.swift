import Logging
import Machines
import Synchronization
import Trust

/// An authorized-peers file as the roles see it: re-read when it changed, so that a peer added or removed counts from
/// the next connection on, without a restart.
///
/// `current()` compares the file's stamp (device, inode, size, modification and status change times) with the one
/// last read and reads the file again when it differs. A new text that cannot be used (malformed, unsafe permissions
/// or place, gone) fails closed: no listed peer is authorized until the file is usable again (a side that lets
/// unlisted keys in still does, unauthenticated), with a warning in the log once per version of the file. Keeping the
/// last good list would keep a peer someone meant to revoke by breaking or deleting the file.
package final class AuthorizedPeersSource: Sendable {
    private struct State {
        var peers: AuthorizedPeers
        var stamp: AuthorizedPeers.FileStamp?
    }

    package let path: String
    /// Unlisted keys are let in too (a side that does not require authorized peers).
    private let acceptsAnyKey: Bool
    /// Only these listed keys count (`send --to`, `receive --from`); removing one from the file still revokes it.
    private let restriction: Set<PeerKey>?
    private let logger: Logger
    private let state: Mutex<State>

    /// Reads the file now: a file that cannot be loaded is the caller's error to report.
    package init(path: String, acceptsAnyKey: Bool = false, restrictedTo restriction: Set<PeerKey>? = nil,
                logger: Logger = Logger(label: "bletransfer.trust")) throws(TrustError) {
        let (text, stamp) = try AuthorizedPeers.readText(from: path)
        let peers = try AuthorizedPeers(parsing: text, path: path)
        guard !peers.peers.isEmpty else { throw .noAuthorizedPeers(path: path) }
        self.path = path
        self.acceptsAnyKey = acceptsAnyKey
        self.restriction = restriction
        self.logger = logger
        state = Mutex(State(peers: Self.inForce(peers, acceptsAnyKey: acceptsAnyKey, restriction: restriction),
                            stamp: stamp))
    }

    private static func inForce(_ peers: AuthorizedPeers, acceptsAnyKey: Bool, restriction: Set<PeerKey>?) -> AuthorizedPeers {
        if let restriction { return peers.restricted(to: restriction) }
        return acceptsAnyKey ? peers.acceptingAnyKey() : peers
    }

    /// The list as the file says now (none while it cannot be used).
    package func current() -> AuthorizedPeers {
        let stamp = AuthorizedPeers.FileStamp.current(of: path)
        return state.withLock { state in
            guard stamp != state.stamp else { return state.peers }
            state.stamp = stamp
            do {
                let read = try AuthorizedPeers.readText(from: path)
                state.stamp = read.stamp
                let peers = try AuthorizedPeers(parsing: read.text, path: path)
                if peers.peers.isEmpty { logger.warning("\(path) lists no peer now: every peer is refused") }
                state.peers = Self.inForce(peers, acceptsAnyKey: acceptsAnyKey, restriction: restriction)
                if restriction != nil && state.peers.peers.isEmpty && !peers.peers.isEmpty {
                    logger.warning("\(path) no longer lists the peer asked for: every peer is refused")
                }
                logger.info("re-read \(path): \(peers.peers.count) authorized peer(s)")
            } catch {
                state.peers = Self.inForce(AuthorizedPeers([]), acceptsAnyKey: acceptsAnyKey, restriction: restriction)
                logger.warning("\(error); every authorized peer is refused until it is fixed")
            }
            return state.peers
        }
    }
}
