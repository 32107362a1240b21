#if canImport(Glibc)
import Glibc
import SystemPackage

/// One entry of a directory as `readdir(3)` gives it: the name and, where the file system
/// tells it, the entry's type (so a listing needs no `lstat` per entry to skip the wrong kind).
package struct DirectoryEntry: Sendable, Equatable {
    package var name: String
    /// `d_type`: `DT_REG`, `DT_DIR`, … or `DT_UNKNOWN` when the file system does not say.
    package var type: UInt8

    /// Whether the entry may be a directory (it is one, or the file system does not say).
    package var mayBeDirectory: Bool { type == UInt8(DT_DIR) || type == UInt8(DT_UNKNOWN) }

    /// The entries of `directory`, "." and ".." left out, in the order the file system gives.
    package static func list(_ directory: String) throws(Errno) -> [DirectoryEntry] {
        guard let stream = opendir(directory) else { throw Errno(rawValue: errno) }
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
