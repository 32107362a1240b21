#if canImport(Glibc)
import Glibc
import SystemPackage

/// One directory entry as `readdir(3)` gives it: the name and, where the file system tells it, the type (so a listing
/// needs no `lstat` per entry to skip the wrong kind).
package struct DirectoryEntry: Sendable, Equatable {
    package var name: String
    /// `d_type`: `DT_REG`, `DT_DIR`, … or `DT_UNKNOWN` when the file system does not say.
    package var type: UInt8

    /// Whether the entry may be a directory (it is one, or the file system does not say).
    package var mayBeDirectory: Bool { type == UInt8(DT_DIR) || type == UInt8(DT_UNKNOWN) }

    /// The entries of `directory`, "." and ".." left out, in the order the file system gives.
    package static func list(_ directory: String) throws(Errno) -> [DirectoryEntry] {
        guard let stream = opendir(directory) else { throw Errno(rawValue: errno) }
        return read(stream)
    }

    /// The entries of the directory held by `descriptor` (left open and unmoved: the listing reads a new open file
    /// description of it), "." and ".." left out.
    public static func list(descriptor: Int32) throws(Errno) -> [DirectoryEntry] {
        let own = openat(descriptor, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard own >= 0 else { throw Errno(rawValue: errno) }
        guard let stream = fdopendir(own) else {
            let error = Errno(rawValue: errno)
            _ = close(own)
            throw error
        }
        return read(stream)
    }

    /// Reads `stream` to its end and closes it.
    private static func read(_ stream: OpaquePointer) -> [DirectoryEntry] {
        defer { closedir(stream) }
        var entries: [DirectoryEntry] = []
        while let entry = readdir(stream) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            guard name != ".", name != ".." else { continue }
            entries.append(DirectoryEntry(name: name, type: entry.pointee.d_type))
        }
        return entries
    }
}
#endif
