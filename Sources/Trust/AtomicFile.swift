import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Replacing a small file so that a crash leaves the old text or the new one, never part of
/// either (as `HostIdentity.write` does for identities).
public enum AtomicFile {
    /// Writes `contents` to a temporary file created in `path`'s directory with `mode`, flushes
    /// it to disk, renames it over `path` and flushes the directory, so the rename itself
    /// survives a crash. Missing parent directories are created with mode 0700.
    public static func replace(path: String, contents: String, mode: mode_t) throws(TrustError) {
        let directory = (path as NSString).deletingLastPathComponent
        let parent = directory.isEmpty ? "." : directory
        try HostIdentity.makeDirectories(parent)
        let name = (path as NSString).lastPathComponent
        var template = Array((parent + "/.\(name)-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else { throw .fileAccess(path: parent, operation: "write in", errno: errno) }
        let temporary = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        var finished = false
        defer {
            if !finished { unlink(temporary) }
        }
        // mkstemp creates 0600; fchmod sets the mode asked for whatever the umask is.
        fchmod(descriptor, mode)
        let bytes = Array(contents.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let error = errno
                close(descriptor)
                throw .fileAccess(path: path, operation: "write", errno: error)
            }
            written += count
        }
        guard fsync(descriptor) == 0 else {
            let error = errno
            close(descriptor)
            throw .fileAccess(path: path, operation: "write", errno: error)
        }
        close(descriptor)
        guard rename(temporary, path) == 0 else { throw .fileAccess(path: path, operation: "write", errno: errno) }
        finished = true
        let directoryDescriptor = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryDescriptor >= 0 {
            // The rename is done; a directory that cannot be flushed loses nothing but durability.
            _ = fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }
}
