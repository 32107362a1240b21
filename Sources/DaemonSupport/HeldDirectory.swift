#if canImport(Glibc)
import Glibc
import SystemPackage

/// A directory held by an open descriptor (`O_DIRECTORY | O_NOFOLLOW`), so that what is done in it — listing,
/// opening, examining, renaming, relative to the descriptor — happens in that directory whatever its name leads to
/// later. Someone who can write the directory's parent (a member of the outbox's group) may swap the name for a
/// symbolic link to a place only the service can read (`renameat2(RENAME_EXCHANGE)`); the descriptor still names the
/// directory it was opened on, and ``isStillNamed()`` tells the swap.
///
/// The directory is also remembered by where it is named: its parent (a duplicate of the parent's descriptor, or the
/// working directory for a path) and its name there.
package final class HeldDirectory: Sendable {
    /// The directory's descriptor, read-only (contents still change through it: `renameat`, `unlinkat`, `openat`).
    package let descriptor: Int32
    package let path: FilePath
    /// Device and inode when opened.
    package let device: UInt64
    package let inode: UInt64
    /// Where the directory is named: the parent's descriptor (ours to close) or `AT_FDCWD`.
    private let parent: Int32
    private let name: String

    private init(descriptor: Int32, path: FilePath, parent: Int32, name: String) throws(Errno) {
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let error = Errno(rawValue: errno)
            _ = close(descriptor)
            if parent != AT_FDCWD { _ = close(parent) }
            throw error
        }
        self.descriptor = descriptor
        self.path = path
        self.parent = parent
        self.name = name
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
    }

    deinit {
        _ = close(descriptor)
        if parent != AT_FDCWD { _ = close(parent) }
    }

    /// Opens the directory at `path`; its last component must not be a symbolic link (the components before it are
    /// followed: they belong to whoever set the path up). `create`: made (mode 0755) first when missing.
    package static func open(_ path: FilePath, create: Bool) throws(Errno) -> HeldDirectory {
        if create, mkdir(path.string, 0o755) != 0, errno != EEXIST { throw Errno(rawValue: errno) }
        let fd = Glibc.open(path.string, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Self.refusal(errno) }
        return try HeldDirectory(descriptor: fd, path: path, parent: AT_FDCWD, name: path.string)
    }

    /// Opens `name` in `parent` by its descriptor, never following a symbolic link; `create`: made (0755) if missing.
    package static func open(_ name: String, in parent: HeldDirectory, create: Bool) throws(Errno) -> HeldDirectory {
        if create, mkdirat(parent.descriptor, name, 0o755) != 0, errno != EEXIST { throw Errno(rawValue: errno) }
        let fd = openat(parent.descriptor, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw Self.refusal(errno) }
        let parentCopy = fcntl(parent.descriptor, F_DUPFD_CLOEXEC, 0)
        guard parentCopy >= 0 else {
            let error = Errno(rawValue: errno)
            _ = close(fd)
            throw error
        }
        return try HeldDirectory(descriptor: fd, path: parent.path.appending(name), parent: parentCopy, name: name)
    }

    /// A symbolic link where a directory was expected reads as "not a directory".
    private static func refusal(_ code: Int32) -> Errno { code == ELOOP ? .notDirectory : Errno(rawValue: code) }

    /// Whether the directory's name still leads to this directory (not to a symbolic link, not to another directory
    /// moved or swapped in); throws what examining the name met (it is gone: `ENOENT`).
    package func isStillNamed() throws(Errno) -> Bool {
        var status = stat()
        guard fstatat(parent, name, &status, AT_SYMLINK_NOFOLLOW) == 0 else { throw Errno(rawValue: errno) }
        return status.st_mode & S_IFMT == S_IFDIR && UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }

    /// `lstat` of `entry` inside this directory.
    package func status(of entry: String) -> stat? {
        var status = stat()
        return fstatat(descriptor, entry, &status, AT_SYMLINK_NOFOLLOW) == 0 ? status : nil
    }

    /// Whether this process may create and remove entries here.
    package var isWritable: Bool { faccessat(descriptor, ".", W_OK | X_OK, 0) == 0 }

    /// What inotify watches this directory through: the descriptor's own `/proc` link (it leads to this directory,
    /// never to what its name leads to now), or the path where there is no `/proc`.
    package var watchPath: (path: String, followsName: Bool) {
        let link = "/proc/self/fd/\(descriptor)"
        return access(link, F_OK) == 0 ? (link, false) : (path.string, true)
    }
}
#endif
