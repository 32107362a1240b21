import SystemCalls
import Foundation
import Machines
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The files `send --file PATH…` names, in the order given: a file as itself (named by its last component), a
/// directory as its tree (each file named by its path from the directory's parent, `docs/notes/plan.md`, as `scp -r`
/// and `rsync` lay it out). Inside a tree symbolic links are not followed and other special files (FIFOs, sockets,
/// devices) are skipped; each gets a line in `notes`. Paths given on the command line are followed, as `cp` does.
package struct FileSet: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        package var path: String
        /// The name it is sent under: one component, or a relative path for a tree's file.
        package var name: String
        /// A tree's file: the directory given on the command line (followed, as `cp` does) and the components below
        /// (never followed: each opened relative to the last, `openat` `O_NOFOLLOW`). Nil for a path given as is.
        package var tree: Tree?
        /// Device and inode as the walk found the file: what is opened when its turn comes must
        /// be that file, not one swapped in under its name since.
        package var device: UInt64
        package var inode: UInt64
        /// Whether the walk found a regular file (a FIFO given on the command line is not).
        package var isRegular: Bool
    }

    package struct Tree: Sendable, Equatable {
        package var root: String
        package var components: [String]
    }

    package var entries: [Entry]
    /// One line per file left out or renamed, for the user.
    package var notes: [String]

    /// The most directories a tree may nest below the directory given (the receiver creates no deeper ones either).
    package static let maximumDepth = 32
    /// The most files one command takes: a bound on the list held in memory.
    package static let maximumCount = 100_000
    /// The longest name the wire carries (``FileMetadata``), in bytes of UTF-8.
    package static let maximumNameBytes = 255

    /// Walks `paths`. Throws a one-line failure (exit 66) for a path that cannot be read at all, or no file at all. A
    /// regular file of any size is sent from disk as it goes; `limit` bounds what must be read into memory (a FIFO).
    package static func collect(_ paths: [String], limit: Int) throws(MessageInput.Failure) -> FileSet {
        var set = FileSet(entries: [], notes: [])
        for path in paths {
            var status = stat()
            guard stat(path, &status) == 0 else {
                throw failure(.noInput, "cannot read '\(path)': \(String(cString: strerror(errno)))")
            }
            if status.st_mode & S_IFMT == S_IFDIR {
                let base = baseName(ofDirectory: path)
                try set.walk(directory: path, root: path, below: [], prefix: base.map { [$0] } ?? [], depth: 0, limit: limit)
            } else {
                try set.add(path: path, components: [FilePath(path).lastComponent?.string ?? path], tree: nil,
                            status: status, limit: limit)
            }
        }
        guard !set.entries.isEmpty else {
            throw failure(.noInput, "nothing to send: \(paths.map { "'\($0)'" }.joined(separator: ", ")) hold no regular file")
        }
        return set
    }

    /// A directory's files' name prefix: its last component (the real one for `.`, `..`); nil for `/` (from root).
    static func baseName(ofDirectory path: String) -> String? {
        var last = FilePath(path).lastComponent?.string
        if last == nil || last == "." || last == ".." {
            last = FilePath(URL(fileURLWithPath: path).standardizedFileURL.path).lastComponent?.string
        }
        return last == "/" ? nil : last
    }

    private mutating func walk(directory: String, root: String, below: [String], prefix: [String], depth: Int,
                               limit: Int) throws(MessageInput.Failure) {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
        } catch {
            notes.append("skipped '\(directory)': cannot list it (\(Self.reason(error)))")
            return
        }
        for name in names {
            let path = directory.hasSuffix("/") ? directory + name : directory + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0 else {
                notes.append("skipped '\(path)': \(String(cString: strerror(errno)))")
                continue
            }
            switch status.st_mode & S_IFMT {
            case S_IFDIR:
                guard depth + 1 <= Self.maximumDepth else {
                    notes.append("skipped '\(path)': deeper than \(Self.maximumDepth) directories")
                    continue
                }
                try walk(directory: path, root: root, below: below + [name], prefix: prefix + [name], depth: depth + 1,
                         limit: limit)
            case S_IFREG:
                try add(path: path, components: prefix + [name], tree: Tree(root: root, components: below + [name]),
                        status: status, limit: limit)
            case S_IFLNK: notes.append("skipped '\(path)': a symbolic link (not followed)")
            default: notes.append("skipped '\(path)': not a regular file")
            }
        }
    }

    private mutating func add(path: String, components: [String], tree: Tree?,
                              status: stat, limit: Int) throws(MessageInput.Failure) {
        guard entries.count < Self.maximumCount else {
            throw Self.failure(.usage, "more than \(Self.maximumCount) files: send them in several runs")
        }
        var name = components.joined(separator: "/")
        if name.utf8.count > Self.maximumNameBytes, let last = components.last {
            notes.append("'\(path)' is sent as '\(last)': its path is over \(Self.maximumNameBytes) bytes")
            name = last
        }
        entries.append(Entry(path: path, name: name, tree: tree, device: UInt64(status.st_dev), inode: UInt64(status.st_ino),
                             isRegular: status.st_mode & S_IFMT == S_IFREG))
    }

    /// Opens `entry` as the walk found it: a tree's file relative to its directories, none of
    /// them followed if it became a symbolic link, and never waiting (`O_NONBLOCK`: a FIFO
    /// swapped in is not waited on); it must be a regular file with the device and inode the
    /// walk saw. Returns the descriptor (the caller closes it) and its status.
    static func open(_ entry: Entry) throws(MessageInput.Failure) -> (Int32, stat) {
        var fd: Int32
        if let tree = entry.tree {
            fd = Glibc.open(tree.root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            for (index, component) in tree.components.enumerated() where fd >= 0 {
                let last = index == tree.components.count - 1
                let flags = last ? O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC : O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
                let next = openat(fd, component, flags)
                let code = errno
                _ = close(fd)
                fd = next
                errno = code
            }
        } else { fd = Glibc.open(entry.path, O_RDONLY | O_NONBLOCK | O_CLOEXEC) }
        guard fd >= 0 else {
            let code = errno
            if code == ELOOP || code == ENOTDIR {
                throw failure(.noInput, "'\(entry.path)' was replaced by a symbolic link since it was listed; not followed")
            }
            throw failure(.noInput, "cannot read '\(entry.path)': \(String(cString: strerror(code)))")
        }
        var status = stat()
        guard fstat(fd, &status) == 0 else {
            let code = errno
            _ = close(fd)
            throw failure(.noInput, "cannot read '\(entry.path)': \(String(cString: strerror(code)))")
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            _ = close(fd)
            throw failure(.noInput, "'\(entry.path)' is no longer a regular file (a FIFO, a device or a directory is there now); not read")
        }
        guard UInt64(status.st_dev) == entry.device, UInt64(status.st_ino) == entry.inode else {
            _ = close(fd)
            throw failure(.noInput, "'\(entry.path)' was replaced by another file since it was listed; not sent")
        }
        // Reading it may block no more than any regular file's read.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return (fd, status)
    }

    private static func failure(_ kind: FailureKind, _ message: String) -> MessageInput.Failure {
        MessageInput.Failure(kind: kind, userMessage: message)
    }

    private static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(underlying.code)))
        }
        return nsError.localizedDescription
    }
}

/// The files of a ``FileSet``, each delivered once, in order, read from disk only in its turn (with `pipeline`, the
/// ones under way and the next, at most `PipelineWindow.messages` + 1). A file no longer readable (removed, made
/// unreadable, grown past the limit since the walk) is passed over and kept in `problems` for the command to report.
package actor FileSetSource: MessageSource {
    package let set: FileSet
    private let limit: Int
    private var index = 0
    private var loaded: [Int: OutgoingMessage] = [:]
    package private(set) var deliveredCount = 0
    package private(set) var problems: [String] = []

    package init(set: FileSet, limit: Int) {
        self.set = set
        self.limit = limit
    }

    package func current() async -> OutgoingMessage? {
        while index < set.entries.count {
            if let message = load(index) { return message }
            index += 1
        }
        return nil
    }

    package func nextAvailableNow() async -> OutgoingMessage? { await current() }

    package func upcomingNow(skipping sentAhead: Int) async -> OutgoingMessage? {
        var found = readable(after: index)
        for _ in 0..<max(0, sentAhead) {
            guard let previous = found else { return nil }
            found = readable(after: previous.position)
        }
        return found?.message
    }

    /// The first entry after `position` that can be read, and its message.
    private func readable(after position: Int) -> (position: Int, message: OutgoingMessage)? {
        var next = position + 1
        while next < set.entries.count {
            if let message = load(next) { return (next, message) }
            next += 1
        }
        return nil
    }

    package func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async {
        guard index < set.entries.count, loaded[index] == message else { return }
        loaded[index] = nil
        deliveredCount += 1
        index += 1
    }

    /// The message of entry `position`, read once; nil (noted) when it cannot be read.
    private func load(_ position: Int) -> OutgoingMessage? {
        if let message = loaded[position] { return message }
        let entry = set.entries[position]
        let prefix = "'\(entry.path)'"
        if problems.contains(where: { $0.hasPrefix(prefix) }) { return nil }
        do {
            let message: OutgoingMessage
            if entry.isRegular {
                // The file the walk listed, opened without following a name swapped since.
                let (fd, status) = try FileSet.open(entry)
                let body = MessagePayload(file: PayloadFile(descriptor: fd, path: entry.path), count: Int(status.st_size))
                let digest: [UInt8]
                do {
                    digest = try body.sha256()
                } catch { throw MessageInput.Failure(kind: .noInput, userMessage: "\(error)") }
                message = OutgoingMessage(body: body, digest: digest, file: SentFileAttributes(
                    name: entry.name, modificationSeconds: Int64(status.st_mtim.tv_sec),
                    modificationNanoseconds: UInt32(clamping: status.st_mtim.tv_nsec)))
            } else {
                // A FIFO or device given on the command line: read as `--file` reads one.
                let read = try MessageInput.file(entry.path).readMessage(limit: limit, allowEmpty: true, sendsName: true)
                let file = read.file.map {
                    SentFileAttributes(name: entry.name, modificationSeconds: $0.modificationSeconds,
                                       modificationNanoseconds: $0.modificationNanoseconds)
                }
                message = OutgoingMessage(body: read.body, digest: read.digest, file: file)
            }
            loaded[position] = message
            return message
        } catch {
            problems.append("\(prefix) was not sent: \((error as? MessageInput.Failure)?.userMessage ?? "\(error)")")
            return nil
        }
    }
}
