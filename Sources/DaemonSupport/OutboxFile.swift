import Transfer
import SystemPackage

/// One message waiting in the outbox, read whole. Until the `Outbox` that returned it is told `markDelivered` or
/// `release`, it holds an advisory lock on the file so a second daemon sharing the directory does not serve it too.
package struct OutboxFile: Sendable, Equatable, CustomStringConvertible {
    package let name: String
    package let path: FilePath
    /// The payload: the claimed file, read from disk as it is sent (any size, constant memory).
    package let body: MessagePayload
    /// SHA-256 of the file's bytes, taken when it was claimed.
    package let digest: [UInt8]
    /// The modification time exactly as the file system holds it, sent with the file: seconds since 1970, ns.
    package let modificationSeconds: Int64
    package let modificationNanoseconds: UInt32
    /// Identity of the file (not of its name): a file replaced under the same name is another message.
    let device: UInt64
    let inode: UInt64

    package var size: Int { body.count }

    /// The whole file in memory (tests and small files).
    package var bytes: [UInt8] { (try? body.loadedBytes()) ?? [] }

    package var description: String { "\(name) (\(size) bytes)" }

    /// Same file, same contents (length, SHA-256): two claims of one file, each with its own descriptor, are equal.
    package static func == (lhs: OutboxFile, rhs: OutboxFile) -> Bool {
        lhs.name == rhs.name && lhs.path == rhs.path && lhs.digest == rhs.digest && lhs.size == rhs.size
            && lhs.modificationSeconds == rhs.modificationSeconds && lhs.modificationNanoseconds == rhs.modificationNanoseconds
            && lhs.device == rhs.device && lhs.inode == rhs.inode
    }
}

/// Something the outbox did on its own that the daemon should log.
package enum OutboxNotice: Sendable, Equatable, CustomStringConvertible {
    /// A file that can never be sent was moved into `failed/`, with a `.reason` file beside it.
    case quarantined(name: String, reason: String, movedTo: FilePath)
    /// A file that can never be sent could not be moved away either; it stays and is skipped until it changes.
    case skipped(name: String, reason: String)

    package var description: String {
        switch self {
        case .quarantined(let name, let reason, let movedTo): "outbox file \(name) moved to \(movedTo): \(reason)"
        case .skipped(let name, let reason): "outbox file \(name) skipped: \(reason)"
        }
    }
}

package enum OutboxError: Error, Sendable, Equatable, CustomStringConvertible {
    case notADirectory(String)
    case cannotCreate(String, Errno)
    case notWritable(String, Errno)
    case cannotList(String, Errno)
    case moveFailed(from: String, to: String, Errno)
    /// The folder's name no longer leads to the directory opened (swapped for a symbolic link or another directory,
    /// or moved away and something else put there): nothing is served from it until it is opened again.
    case replaced(String)

    package var description: String {
        switch self {
        case .notADirectory(let path): "outbox \(path) exists and is not a directory"
        case .cannotCreate(let path, let errno): "cannot create outbox directory \(path): \(errno)"
        case .notWritable(let path, let errno): "cannot write into outbox directory \(path): \(errno)"
        case .cannotList(let path, let errno): "cannot list outbox directory \(path): \(errno)"
        case .moveFailed(let from, let to, let errno): "cannot move \(from) to \(to): \(errno)"
        case .replaced(let path): "outbox directory \(path) was replaced (by a symbolic link or another directory); not served from"
        }
    }
}
