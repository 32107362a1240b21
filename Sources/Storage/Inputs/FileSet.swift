import Foundation
import Machines
import SystemPackage
import Transfer

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The files `send --file PATH…` names, in the order given: a file as itself (named by its last
/// component), a directory as its tree (each file named by its path from the directory's
/// parent, `docs/notes/plan.md`, as `scp -r` and `rsync` lay it out). Inside a tree symbolic
/// links are not followed and other special files (FIFOs, sockets, devices) are skipped; each
/// gets a line in `notes`. Paths given on the command line are followed, as `cp` does.
package struct FileSet: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        /// Where the file is read from.
        package var path: String
        /// The name it is sent under: one component, or a relative path for a tree's file.
        package var name: String
    }

    package var entries: [Entry]
    /// One line per file left out or renamed, for the user.
    package var notes: [String]

    /// The most directories a tree may nest below the directory given (the receiver creates
    /// no deeper ones either).
    package static let maximumDepth = 32
    /// The most files one command takes: a bound on the list held in memory.
    package static let maximumCount = 100_000
    /// The longest name the wire carries (``FileMetadata``), in bytes of UTF-8.
    package static let maximumNameBytes = 255

    /// Walks `paths`. Throws a one-line failure (exit 66) for a path that cannot be read at
    /// all, or no file at all. A regular file of any size is sent from disk as it goes;
    /// `limit` bounds what must be read into memory (a FIFO).
    package static func collect(_ paths: [String], limit: Int) throws(MessageInput.Failure) -> FileSet {
        var set = FileSet(entries: [], notes: [])
        for path in paths {
            var status = stat()
            guard stat(path, &status) == 0 else {
                throw failure(.noInput, "cannot read '\(path)': \(String(cString: strerror(errno)))")
            }
            if status.st_mode & S_IFMT == S_IFDIR {
                let base = baseName(ofDirectory: path)
                try set.walk(directory: path, prefix: base.map { [$0] } ?? [], depth: 0, limit: limit)
            } else {
                try set.add(path: path, components: [FilePath(path).lastComponent?.string ?? path], status: status, limit: limit)
            }
        }
        guard !set.entries.isEmpty else {
            throw failure(.noInput, "nothing to send: \(paths.map { "'\($0)'" }.joined(separator: ", ")) hold no regular file")
        }
        return set
    }

    /// The name a directory's files start with: its last component (the real one for `.` or
    /// `..`); nil for `/`, whose files are named from the root down.
    static func baseName(ofDirectory path: String) -> String? {
        var last = FilePath(path).lastComponent?.string
        if last == nil || last == "." || last == ".." {
            last = FilePath(URL(fileURLWithPath: path).standardizedFileURL.path).lastComponent?.string
        }
        return last == "/" ? nil : last
    }

    private mutating func walk(directory: String, prefix: [String], depth: Int, limit: Int) throws(MessageInput.Failure) {
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
                try walk(directory: path, prefix: prefix + [name], depth: depth + 1, limit: limit)
            case S_IFREG:
                try add(path: path, components: prefix + [name], status: status, limit: limit)
            case S_IFLNK:
                notes.append("skipped '\(path)': a symbolic link (not followed)")
            default:
                notes.append("skipped '\(path)': not a regular file")
            }
        }
    }

    private mutating func add(path: String, components: [String], status: stat, limit: Int) throws(MessageInput.Failure) {
        guard entries.count < Self.maximumCount else {
            throw Self.failure(.usage, "more than \(Self.maximumCount) files: send them in several runs")
        }
        var name = components.joined(separator: "/")
        if name.utf8.count > Self.maximumNameBytes, let last = components.last {
            notes.append("'\(path)' is sent as '\(last)': its path is over \(Self.maximumNameBytes) bytes")
            name = last
        }
        entries.append(Entry(path: path, name: name))
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

/// The files of a ``FileSet``, each delivered once, in order, read from disk only when its turn
/// comes (with `pipeline`, the ones under way and the next, at most `PipelineWindow.messages` + 1).
/// A file that can no longer be read (removed, made unreadable, grown past the limit since the
/// walk) is passed over and kept in `problems` for the command to report.
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

    package func nextAvailableNow() async -> OutgoingMessage? {
        await current()
    }

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
            let read = try MessageInput.file(entry.path).readMessage(limit: limit, allowEmpty: true, sendsName: true)
            let file = read.file.map {
                SentFileAttributes(name: entry.name, modificationSeconds: $0.modificationSeconds,
                                   modificationNanoseconds: $0.modificationNanoseconds)
            }
            let message = OutgoingMessage(body: read.body, digest: read.digest, file: file)
            loaded[position] = message
            return message
        } catch {
            problems.append("\(prefix) was not sent: \(error.userMessage)")
            return nil
        }
    }
}
