#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Machines
import SystemCalls
import SystemPackage
import Transfer

/// Writes one message to a named file (`--output PATH`) atomically: bytes go to a hidden temporary file beside it, are
/// flushed, then renamed over the target: it holds the old content or the whole message, never a part.
package struct SingleFileSink: MessageSink {
    package let path: FilePath

    /// Checks that the directory exists and takes new files, so a bad path fails before any Bluetooth work starts.
    package init(path: FilePath) throws(SinkFailure) {
        self.path = path
        let directory = Self.directory(of: path)
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: directory.string, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw SinkFailure(.cannotCreate, "cannot write \(path): directory \(directory) does not exist")
        }
        if FileManager.default.fileExists(atPath: path.string, isDirectory: &isDirectory), isDirectory.boolValue {
            throw SinkFailure(.cannotCreate, "cannot write \(path): it is a directory (use --output-dir for a directory)")
        }
        guard access(directory.string, W_OK | X_OK) == 0 else {
            throw SinkFailure(.permissionDenied, "cannot write \(path): no permission to create files in \(directory)")
        }
    }

    /// Writes, flushes and renames on ``BlockingCalls/storage``: none of it blocks the cooperative pool.
    package func store(_ message: ReceivedMessage, sequence: Int, from peer: PeerDescription?) async throws -> String? {
        let path = path
        if let file = message.body.file, file.removesPathWhenReleased,
           FilePath(file.path).removingLastComponent() == Self.directory(of: path) {
            // Came into our partial file beside the target: flushed and renamed over it, no copy.
            try await BlockingCalls.run { () throws(SinkFailure) in try Self.replace(path, withPartial: file) }
            return path.string
        }
        let payload = message.payload
        try await BlockingCalls.run { () throws(SinkFailure) in try Self.replace(path, with: payload) }
        return path.string
    }

    /// Framed messages of 256 KiB or more come into a hidden partial file beside the target,
    /// written as they arrive; storing renames it over the target. Any size, no memory.
    package var partialPayloadStore: (any PartialPayloadStore)? {
        OutputDirectory.PartialFiles(directory: Self.directory(of: path), threshold: OutputDirectory.partialFileThreshold)
    }

    /// The target's directory keeps the default reserve free, as an output directory does.
    package func admissionRefusal(announced: Int) -> StorageRefusal? { writeRefusal(announced: announced, received: 0) }

    package func writeRefusal(announced: Int?, received: Int) -> StorageRefusal? {
        guard let announced else { return nil }
        return StorageLimits.default.writeRefusal(at: Self.directory(of: path).string, announced: announced, received: received)
    }

    /// The partial file flushed and renamed over `path`, then the directory flushed.
    static func replace(_ path: FilePath, withPartial file: PayloadFile) throws(SinkFailure) {
        guard fsync(file.descriptor) == 0, rename(file.path, path.string) == 0 else {
            throw SinkFailure(.ioError, "cannot write \(path): \(Errno(rawValue: errno))")
        }
        syncDirectory(of: path)
    }

    /// Puts `payload` at `path` in the crash-safe order: temporary file written and flushed,
    /// renamed over `path`, directory flushed. Blocks (the flushes wait for the disk).
    static func replace(_ path: FilePath, with payload: [UInt8]) throws(SinkFailure) {
        let directory = Self.directory(of: path)
        let temporary = directory.appending(".bletransfer-partial-\(UUID().uuidString)")
        do {
            let fd = try FileDescriptor.open(
                temporary, .writeOnly, options: [.create, .exclusiveCreate, .closeOnExec],
                permissions: [.ownerReadWrite, .groupRead, .otherRead])
            try fd.closeAfter {
                _ = try fd.writeAll(payload)
                guard fsync(fd.rawValue) == 0 else { throw Errno(rawValue: errno) }
            }
            guard rename(temporary.string, path.string) == 0 else { throw Errno(rawValue: errno) }
        } catch {
            _ = unlink(temporary.string)
            throw SinkFailure(.ioError, "cannot write \(path): \(error)")
        }
        syncDirectory(of: path)
    }

    /// Flushes the directory of `path`, so that the rename survives a crash.
    private static func syncDirectory(of path: FilePath) {
        let directoryFD = open(directory(of: path).string, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            _ = fsync(directoryFD)
            _ = close(directoryFD)
        }
    }

    static func directory(of path: FilePath) -> FilePath {
        let parent = path.removingLastComponent()
        return parent.isEmpty ? FilePath(".") : parent
    }
}
