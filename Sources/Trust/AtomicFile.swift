import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Replacing a small file so that a crash leaves the old text or the new one, never part of either.
package enum AtomicFile {
    /// Writes `contents` to a temporary file (with `mode`, in `path`'s directory), flushes it, renames it over `path`
    /// and flushes the directory so the rename survives a crash. Missing parents are created with mode 0700.
    package static func replace(path: String, contents: String, mode: mode_t) throws(TrustError) {
        let directory = (path as NSString).deletingLastPathComponent
        let parent = directory.isEmpty ? "." : directory
        try HostIdentity.makeDirectories(parent)
        let name = (path as NSString).lastPathComponent
        let temporary = try writeTemporary(in: parent, prefix: ".\(name)", contents: contents, mode: mode, for: path)
        guard rename(temporary, path) == 0 else {
            let error = errno
            unlink(temporary)
            throw .fileAccess(path: path, operation: "write", errno: error)
        }
        let directoryDescriptor = open(parent, O_RDONLY | O_CLOEXEC | O_DIRECTORY)
        if directoryDescriptor >= 0 {
            // The rename is done; a directory that cannot be flushed loses nothing but durability.
            _ = fsync(directoryDescriptor)
            close(directoryDescriptor)
        }
    }

    /// Creates `parent/prefix-XXXXXX` (mkstemp: 0600, never readable by others, not even briefly),
    /// sets `mode`, writes `contents`, flushes; returns its path for the caller to rename, link or
    /// unlink. Errors name `path` (the file it stands for), and remove the temporary.
    static func writeTemporary(in parent: String, prefix: String, contents: String, mode: mode_t,
                               for path: String) throws(TrustError) -> String {
        var template = Array((parent + "/\(prefix)-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else { throw .fileAccess(path: parent, operation: "write in", errno: errno) }
        let temporary = String(decoding: template.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        defer { close(descriptor) }
        // fchmod sets the mode asked for whatever the umask is.
        fchmod(descriptor, mode)
        let bytes = Array(contents.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                let error = errno
                unlink(temporary)
                throw .fileAccess(path: path, operation: "write", errno: error)
            }
            written += count
        }
        guard fsync(descriptor) == 0 else {
            let error = errno
            unlink(temporary)
            throw .fileAccess(path: path, operation: "write", errno: error)
        }
        return temporary
    }
}

/// Reads an open trust file to its end, at most `limit` bytes (nil: more). Plain C calls with their
/// own EINTR retry: Trust depends on swift-crypto alone (the fuzz harness compiles it by itself).
enum TrustFileReader {
    static func readAll(_ descriptor: Int32, path: String, limit: Int) throws(TrustError) -> [UInt8]? {
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(descriptor, &buffer, buffer.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw .fileAccess(path: path, operation: "read", errno: errno)
            }
            if count == 0 { return bytes }
            bytes += buffer[0..<count]
            if bytes.count > limit { return nil }
        }
    }
}
