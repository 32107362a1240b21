#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What can go wrong with keys, identity and authorized-peers files: one line each, naming the file and what to do.
package enum TrustError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A key line or raw key is malformed; the reason says how.
    case malformedKey(String)
    case identityMissing(path: String)
    /// `keygen` without `--force` found a file already there.
    case identityExists(path: String)
    /// The private key file can be read by group or others (`mode` is its permission bits).
    case identityTooOpen(path: String, mode: UInt32)
    /// The identity file is not in the format `HostIdentity` writes.
    case malformedIdentity(path: String, line: Int, reason: String)
    /// The operating system refused to read or write a key file.
    case fileAccess(path: String, operation: String, errno: Int32)
    /// The authorized-peers file has malformed lines (every one of them, with line numbers).
    case malformedAuthorizedPeers(path: String, problems: [AuthorizedPeers.Problem])
    case noAuthorizedPeers(path: String)
    /// The authorized-peers file (or a directory above) could be changed by someone else: refused,
    /// as sshd's StrictModes does. `fix` is the command that repairs it.
    case authorizedPeersUnsafe(path: String, reason: String, fix: String)

    package var description: String {
        switch self {
        case .malformedKey(let reason):
            return "malformed public key: \(reason)"
        case .identityMissing(let path):
            return "no identity at \(path); create one with 'bletransfer keygen --identity \(path)'"
        case .identityExists(let path):
            return "\(path) already exists; 'bletransfer id --identity \(path)' shows it, --force replaces it"
        case .identityTooOpen(let path, let mode):
            return "\(path) is readable by others (mode \(String(mode & 0o777, radix: 8))); run 'chmod 600 \(path)' — a private key must be readable by its owner only"
        case .malformedIdentity(let path, let line, let reason):
            // A problem of the whole file (a directory, too long) has no line.
            return line > 0 ? "\(path):\(line): \(reason)" : "\(path): \(reason)"
        case .fileAccess(let path, let operation, let errno):
            return "cannot \(operation) \(path): \(String(cString: strerror(errno)))"
        case .malformedAuthorizedPeers(let path, let problems):
            // A problem of the whole file (not a regular file, too long) has no line.
            let shown = problems.prefix(3).map { $0.line > 0 ? "line \($0.line): \($0.reason)" : $0.reason }
                .joined(separator: "; ")
            let more = problems.count > 3 ? "; and \(problems.count - 3) more" : ""
            return "\(path): \(shown)\(more)"
        case .noAuthorizedPeers(let path):
            return "\(path) lists no peer; add the line 'bletransfer id' prints on each peer"
        case .authorizedPeersUnsafe(let path, let reason, let fix):
            return "\(path) \(reason); run '\(fix)' — whoever can write it can let any key in"
        }
    }
}
