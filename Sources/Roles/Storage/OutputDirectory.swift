#if canImport(Glibc)
import Glibc
#endif
import CFileAttributes
import Foundation
import SystemPackage

/// A directory that receives messages, one file each, atomically and without ever replacing a
/// file: the payload goes to a hidden partial file first, is flushed to disk, and only then
/// gets its final name through `link(2)`, which fails rather than overwrites. A reader of the
/// directory therefore sees whole messages or nothing.
public struct OutputDirectory: Sendable {
    public let path: FilePath

    /// Prefix of the partial files; anything with it is ours and unfinished.
    static let partialPrefix = ".bletransfer-partial-"

    /// Opens (creating it when missing) the directory and removes partial files that an
    /// earlier, interrupted run left behind.
    public init(path: FilePath) throws(OutputDirectoryError) {
        self.path = path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path.string, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw .notADirectory(path.string) }
        } else {
            do {
                try FileManager.default.createDirectory(atPath: path.string, withIntermediateDirectories: true)
            } catch {
                throw .cannotCreate(path.string, reason: error.localizedDescription)
            }
        }
        guard access(path.string, W_OK | X_OK) == 0 else {
            throw .notWritable(path.string, Errno(rawValue: errno))
        }
        removeStalePartialFiles()
    }

    /// The extended attribute naming the key of the sender the secure mode authenticated: its
    /// public key line (`getfattr -n user.bletransfer.sender FILE`).
    public static let senderAttribute = "user.bletransfer.sender"

    /// Writes `payload` as a new file named after `baseName` (a number is added when the name
    /// is taken) and returns its path. The file appears complete or not at all. `sender`: the
    /// authenticated sender's public key line, stored as `senderAttribute` with the file where
    /// the file system supports user extended attributes (`senderAttributeMissing` says when
    /// it did not).
    @discardableResult
    public func store(_ payload: some Collection<UInt8>, baseName: String,
                      sender: String? = nil) throws(OutputDirectoryError) -> FilePath {
        let partial = path.appending(Self.partialPrefix + UUID().uuidString)
        do {
            let fd = try FileDescriptor.open(
                partial, .writeOnly, options: [.create, .exclusiveCreate, .closeOnExec],
                permissions: [.ownerReadWrite, .groupRead, .otherRead])
            do {
                try fd.closeAfter {
                    _ = try fd.writeAll(payload)
                    if let sender {
                        // Best effort: tmpfs before Linux 6.6 and some mounts have no user
                        // xattrs; the event and the log line still name the sender.
                        _ = Array(sender.utf8).withUnsafeBytes { bytes in
                            fsetxattr(fd.rawValue, Self.senderAttribute, bytes.baseAddress, bytes.count, 0)
                        }
                    }
                    // Data must be on disk before the name appears, or a crash could leave a
                    // complete-looking name over an empty file.
                    guard fsync(fd.rawValue) == 0 else { throw Errno(rawValue: errno) }
                }
            } catch {
                _ = unlink(partial.string)
                throw error
            }
        } catch let error as Errno {
            throw .writeFailed(path.string, error)
        } catch {
            throw .writeFailed(path.string, .ioError)
        }
        defer { _ = unlink(partial.string) }

        let safeBase = Self.sanitizedFileName(baseName)
        for attempt in 0..<10_000 {
            let name = attempt == 0 ? safeBase : Self.numbered(safeBase, attempt)
            let final = path.appending(name)
            if link(partial.string, final.string) == 0 {
                syncDirectory()
                return final
            }
            let error = Errno(rawValue: errno)
            if error != .fileExists { throw .writeFailed(path.string, error) }
        }
        throw .noFreeName(path.string, safeBase)
    }

    /// Removes partial files left by an interrupted run; they never had a final name.
    public func removeStalePartialFiles() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path.string) else { return }
        for name in names where name.hasPrefix(Self.partialPrefix) {
            _ = unlink(path.appending(name).string)
        }
    }

    /// The names a user sees: no path separators, no leading dot, nothing empty.
    static func sanitizedFileName(_ name: String) -> String {
        var cleaned = String(name.map { $0 == "/" || $0 == "\0" ? "_" : $0 })
        while cleaned.hasPrefix(".") { cleaned.removeFirst() }
        if cleaned.isEmpty { cleaned = "message" }
        return String(cleaned.prefix(200))
    }

    /// "message.txt" → "message-1.txt"; "message" → "message-1".
    static func numbered(_ name: String, _ number: Int) -> String {
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot])-\(number)\(name[dot...])"
        }
        return "\(name)-\(number)"
    }

    private func syncDirectory() {
        let fd = open(path.string, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        _ = close(fd)
    }
}

public enum OutputDirectoryError: Error, Sendable, Equatable, CustomStringConvertible {
    case notADirectory(String)
    case cannotCreate(String, reason: String)
    case notWritable(String, Errno)
    case writeFailed(String, Errno)
    case noFreeName(String, String)

    public var description: String {
        switch self {
        case .notADirectory(let path): "\(path) exists and is not a directory"
        case .cannotCreate(let path, let reason): "cannot create directory \(path): \(reason)"
        case .notWritable(let path, let errno): "cannot write into \(path): \(errno)"
        case .writeFailed(let path, let errno): "writing a message into \(path) failed: \(errno)"
        case .noFreeName(let path, let base): "no free file name for \(base) in \(path)"
        }
    }
}
