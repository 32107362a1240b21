import Foundation

/// The hosts this host exchanges messages with in secure mode, read from an authorized-peers
/// file:
///
/// ```
/// # comments and blank lines are ignored
/// bletransfer-x25519 q2V5IGJ5dGVzIGdvIGhlcmUgLi4uIDMyIG9mIHRoZW0= laptop
/// bletransfer-x25519 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
/// ```
///
/// One public key line per peer (as `bletransfer id` prints it); the name after the key is
/// optional and only shown in logs. Every malformed line is reported with its number, and a key
/// listed twice is an error (two names for one key would make logs ambiguous).
public struct AuthorizedPeers: Sendable, Equatable {
    public struct Peer: Sendable, Equatable {
        public var key: PeerKey
        public var name: String?
        /// The line it was read from, 1-based; 0 for a key no file lists (`anyKey`).
        public var line: Int
        /// Whether an authorized-peers file lists this key: false for the key of a peer that
        /// `anyKey` let in (encrypted, not authenticated).
        public var isListed: Bool { line > 0 }

        public init(key: PeerKey, name: String?, line: Int) {
            self.key = key
            self.name = name
            self.line = line
        }
    }

    public struct Problem: Sendable, Equatable {
        public var line: Int
        public var reason: String
    }

    public private(set) var peers: [Peer]
    private var byKey: [PeerKey: Int]
    /// Any key is let in (as an unlisted peer): the policy of a host that has no
    /// authorized-peers file. Its sessions are encrypted but authenticate nobody.
    public private(set) var acceptsAnyKey: Bool

    /// Lets in any key: a session with it is encrypted, and the peer's key is only shown.
    public static var anyKey: AuthorizedPeers { AuthorizedPeers(acceptingAnyKey: ()) }

    private init(acceptingAnyKey: Void) {
        peers = []
        byKey = [:]
        acceptsAnyKey = true
    }

    /// The same list, letting in unlisted keys too (as unlisted peers, encrypted to but not
    /// authenticated): the policy of a side that does not require authorized peers.
    public func acceptingAnyKey() -> AuthorizedPeers {
        var copy = self
        copy.acceptsAnyKey = true
        return copy
    }

    public init(_ peers: [Peer] = []) {
        self.peers = []
        self.byKey = [:]
        acceptsAnyKey = false
        for peer in peers where byKey[peer.key] == nil {
            byKey[peer.key] = self.peers.count
            self.peers.append(peer)
        }
    }

    /// Parses a file's text: all peers, or every problem found. `path` names the file in errors.
    public init(parsing text: String, path: String) throws(TrustError) {
        var peers: [Peer] = []
        var firstLine: [PeerKey: Int] = [:]
        var problems: [Problem] = []
        for (index, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let number = index + 1
            let line = rawLine.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
            if line.isEmpty || line.hasPrefix("#") { continue }
            do {
                let (key, name) = try PeerKey.parseLine(Substring(line))
                if let earlier = firstLine[key] {
                    problems.append(Problem(line: number, reason: "the key of line \(earlier) again"))
                    continue
                }
                firstLine[key] = number
                peers.append(Peer(key: key, name: name, line: number))
            } catch {
                problems.append(Problem(line: number, reason: error.description))
            }
        }
        guard problems.isEmpty else { throw .malformedAuthorizedPeers(path: path, problems: problems) }
        self.init(peers)
    }

    /// Reads and parses the file at `path`. An empty list is an error here: a daemon given an
    /// authorized-peers file that authorizes nobody would refuse every peer, silently.
    public static func load(from path: String) throws(TrustError) -> AuthorizedPeers {
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch let error as CocoaError {
            let code: Int32 =
                switch error.code {
                case .fileReadNoSuchFile, .fileNoSuchFile: ENOENT
                case .fileReadNoPermission: EACCES
                default: EIO
                }
            throw .fileAccess(path: path, operation: "read", errno: code)
        } catch {
            throw .fileAccess(path: path, operation: "read", errno: EIO)
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw .malformedAuthorizedPeers(path: path, problems: [Problem(line: 0, reason: "not UTF-8 text")])
        }
        let peers = try AuthorizedPeers(parsing: text, path: path)
        guard !peers.peers.isEmpty else { throw .noAuthorizedPeers(path: path) }
        return peers
    }

    /// The entry for `key`, nil when the key is not authorized. With `acceptsAnyKey` an
    /// unlisted key gets an entry without a name or line (`isListed` false).
    public func peer(for key: PeerKey) -> Peer? {
        if let index = byKey[key] { return peers[index] }
        return acceptsAnyKey ? Peer(key: key, name: nil, line: 0) : nil
    }

    public func isAuthorized(_ key: PeerKey) -> Bool { peer(for: key) != nil }
}
