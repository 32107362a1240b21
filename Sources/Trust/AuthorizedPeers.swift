import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The hosts this host exchanges messages with, read from an authorized-peers file:
///
/// ```
/// # comments and blank lines are ignored
/// bletransfer-x25519 q2V5IGJ5dGVzIGdvIGhlcmUgLi4uIDMyIG9mIHRoZW0= laptop
/// bletransfer-x25519 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
/// ```
///
/// One key line per peer (as `bletransfer id` prints it), the name optional. Every malformed line
/// is reported with its number; a key listed twice is an error (two names would make logs ambiguous).
package struct AuthorizedPeers: Sendable, Equatable {
    package struct Peer: Sendable, Equatable {
        package var key: PeerKey
        package var name: String?
        /// The line it was read from, 1-based; 0 for a key no file lists (`anyKey`).
        package var line: Int
        /// False for a key `anyKey` let in (encrypted, not authenticated).
        package var isListed: Bool { line > 0 }

        package init(key: PeerKey, name: String?, line: Int) {
            self.key = key
            self.name = name
            self.line = line
        }
    }

    package struct Problem: Sendable, Equatable {
        package var line: Int
        package var reason: String
    }

    package private(set) var peers: [Peer]
    private var byKey: [PeerKey: Int]
    /// Any key is let in (unlisted): a host without an authorized-peers file; encrypted, but authenticating nobody.
    package private(set) var acceptsAnyKey: Bool

    /// Lets in any key: the session is encrypted, the peer's key only shown.
    package static var anyKey: AuthorizedPeers { AuthorizedPeers().acceptingAnyKey() }

    /// The same list, letting in unlisted keys too: a side that does not require authorized peers.
    package func acceptingAnyKey() -> AuthorizedPeers {
        var copy = self
        copy.acceptsAnyKey = true
        return copy
    }

    /// Only the listed peers with one of `keys`: the addressee of `send --to`, senders of `receive --from`.
    package func restricted(to keys: Set<PeerKey>) -> AuthorizedPeers {
        AuthorizedPeers(peers.filter { keys.contains($0.key) })
    }

    package init(_ peers: [Peer] = []) {
        self.peers = []
        self.byKey = [:]
        acceptsAnyKey = false
        for peer in peers where byKey[peer.key] == nil {
            byKey[peer.key] = self.peers.count
            self.peers.append(peer)
        }
    }

    /// Parses a file's text: all peers, or every problem found. `path` names the file in errors.
    package init(parsing text: String, path: String) throws(TrustError) {
        var peers: [Peer] = []
        var firstLine: [PeerKey: Int] = [:]
        // Names are NFC already (`PeerKey.parseLine`): one name for two keys would make an addressee ambiguous.
        var nameLine: [String: Int] = [:]
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
                if let name, let earlier = nameLine[name] {
                    problems.append(Problem(line: number, reason: "the name '\(name.prefix(64))' of line \(earlier) again "
                        + "(rename one: bletransfer peers rename)"))
                    continue
                }
                firstLine[key] = number
                if let name { nameLine[name] = number }
                peers.append(Peer(key: key, name: name, line: number))
            } catch {
                problems.append(Problem(line: number, reason: error.description))
            }
        }
        guard problems.isEmpty else { throw .malformedAuthorizedPeers(path: path, problems: problems) }
        self.init(peers)
    }

    /// Reads and parses the file at `path`. An empty list is an error: a daemon would silently
    /// refuse every peer. Files others could change are refused (`readText`), as sshd's StrictModes does.
    package static func load(from path: String) throws(TrustError) -> AuthorizedPeers {
        let peers = try AuthorizedPeers(parsing: readText(from: path).text, path: path)
        guard !peers.peers.isEmpty else { throw .noAuthorizedPeers(path: path) }
        return peers
    }

    /// A file's version as `stat` tells it: any change means it was rewritten (a rename changes the
    /// inode, an edit the size or mtime) or its mode or owner changed (ctime).
    package struct FileStamp: Sendable, Hashable {
        package var device: UInt64
        package var inode: UInt64
        package var size: Int64
        package var modifiedSeconds: Int64
        package var modifiedNanoseconds: Int64
        package var changedSeconds: Int64
        package var changedNanoseconds: Int64

        init(_ status: stat) {
            device = UInt64(status.st_dev)
            inode = UInt64(status.st_ino)
            size = Int64(status.st_size)
            modifiedSeconds = Int64(status.st_mtim.tv_sec)
            modifiedNanoseconds = Int64(status.st_mtim.tv_nsec)
            changedSeconds = Int64(status.st_ctim.tv_sec)
            changedNanoseconds = Int64(status.st_ctim.tv_nsec)
        }

        /// The stamp of the file at `path` now, nil when it cannot be examined.
        package static func current(of path: String) -> FileStamp? {
            var status = stat()
            guard stat(path, &status) == 0 else { return nil }
            return FileStamp(status)
        }
    }

    /// Refuses a file writable by group or others, or owned by neither `user` nor root: others could change it.
    package static func checkOwnership(path: String, mode: UInt32, owner: UInt32, user: UInt32) throws(TrustError) {
        if mode & 0o022 != 0 {
            throw .authorizedPeersUnsafe(
                path: path, reason: "is writable by group or others (mode \(String(mode & 0o777, radix: 8)))",
                fix: "chmod go-w \(path)")
        }
        if owner != 0 && owner != user {
            throw .authorizedPeersUnsafe(
                path: path, reason: "belongs to user \(owner), not to root or to you (user \(user))",
                fix: "chown \(user) \(path)")
        }
    }

    /// Refuses a file someone else could replace through a directory above it (StrictModes): each,
    /// up to `/` (symbolic links resolved), must belong to root or `user` and be writable by group
    /// or others only when sticky (`/tmp`: nobody can rename another's entry).
    package static func checkDirectories(above path: String, user: UInt32) throws(TrustError) {
        let parent = path.contains("/") ? String(path[..<path.lastIndex(of: "/")!]) : "."
        guard let resolved = realpath(parent.isEmpty ? "/" : parent, nil) else {
            throw .fileAccess(path: path, operation: "read", errno: errno)
        }
        var directory = String(cString: resolved)
        free(resolved)
        while true {
            var status = stat()
            guard lstat(directory, &status) == 0 else { throw .fileAccess(path: path, operation: "read", errno: errno) }
            let mode = UInt32(status.st_mode)
            if status.st_uid != 0 && UInt32(status.st_uid) != user {
                throw .authorizedPeersUnsafe(
                    path: path, reason: "is in \(directory), which belongs to user \(status.st_uid), not to root or to you (user \(user))",
                    fix: "move it to a directory of yours, such as ~/.config/bletransfer/")
            }
            if mode & 0o022 != 0 && mode & UInt32(S_ISVTX) == 0 {
                throw .authorizedPeersUnsafe(
                    path: path, reason: "is in \(directory), which group or others can write (mode \(String(mode & 0o777, radix: 8)))",
                    fix: "chmod go-w \(directory)")
            }
            guard directory != "/" else { return }
            let up = directory[..<directory.lastIndex(of: "/")!]
            directory = up.isEmpty ? "/" : String(up)
        }
    }

    /// The file's text and stamp, after the ownership checks of it and the directories above. Not
    /// a symbolic link (whoever may change it could point it elsewhere); at most 1 MiB.
    package static func readText(from path: String) throws(TrustError) -> (text: String, stamp: FileStamp) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard descriptor >= 0 else {
            let code = errno
            var status = stat()
            if code == ELOOP, lstat(path, &status) == 0, status.st_mode & S_IFMT == S_IFLNK {
                throw .authorizedPeersUnsafe(path: path, reason: "is a symbolic link, which is not followed",
                                             fix: "give the file it points to, or copy it here")
            }
            throw .fileAccess(path: path, operation: "read", errno: code)
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .fileAccess(path: path, operation: "read", errno: errno) }
        let mode = UInt32(status.st_mode)
        guard mode & UInt32(S_IFMT) == UInt32(S_IFREG) else {
            let what = mode & UInt32(S_IFMT) == UInt32(S_IFDIR) ? "is a directory, not a file" : "is not a regular file"
            throw .malformedAuthorizedPeers(path: path, problems: [Problem(line: 0, reason: what + "; give the file's path")])
        }
        try checkOwnership(path: path, mode: mode, owner: UInt32(status.st_uid), user: UInt32(geteuid()))
        try checkDirectories(above: path, user: UInt32(geteuid()))
        guard let bytes = try TrustFileReader.readAll(descriptor, path: path, limit: 1 << 20) else {
            throw .malformedAuthorizedPeers(path: path, problems: [Problem(line: 0, reason: "is over 1 MiB")])
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .malformedAuthorizedPeers(path: path, problems: [Problem(line: 0, reason: "is not UTF-8 text")])
        }
        return (text, FileStamp(status))
    }

    /// The entry for `key`, nil when unauthorized; with `acceptsAnyKey` an unlisted key gets one without name or line.
    package func peer(for key: PeerKey) -> Peer? {
        if let index = byKey[key] { return peers[index] }
        return acceptsAnyKey ? Peer(key: key, name: nil, line: 0) : nil
    }
}
