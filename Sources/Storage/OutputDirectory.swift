#if canImport(Glibc)
import Glibc
#endif
import CFileAttributes
import DaemonSupport
import Foundation
import SystemCalls
import SystemPackage
import Transfer

/// A directory that receives messages, one file each, atomically and without ever replacing a file: the payload goes
/// to a hidden partial file first, is flushed to disk, and only then gets its final name through `link(2)`, which
/// fails rather than overwrites. A reader of the directory therefore sees whole messages or nothing.
package struct OutputDirectory: Sendable {
    package let path: FilePath
    /// The longest name, in bytes, the directory's file system takes (`pathconf`'s `_PC_NAME_MAX`: 255 on most, 143
    /// on eCryptfs). A longer name is refused before it is tried, as the file system would refuse it.
    package let nameLimit: Int

    /// Prefix of the partial files; anything with it is ours and unfinished.
    static let partialPrefix = ".bletransfer-partial-"

    /// Opens (creating it when missing) the directory and removes partial files an interrupted run left behind.
    /// `nameLimit`: the name limit in bytes (nil: ask the file system); tests give a smaller one (as eCryptfs).
    package init(path: FilePath, nameLimit: Int? = nil) throws(OutputDirectoryError) {
        self.path = path
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path.string, isDirectory: &isDirectory) {
            guard isDirectory.boolValue else { throw .notADirectory(path.string) }
        } else {
            do {
                try FileManager.default.createDirectory(atPath: path.string, withIntermediateDirectories: true)
            } catch { throw .cannotCreate(path.string, reason: Self.reason(error)) }
        }
        guard access(path.string, W_OK | X_OK) == 0 else { throw .notWritable(path.string, Errno(rawValue: errno)) }
        let asked = pathconf(path.string, Int32(_PC_NAME_MAX))
        self.nameLimit = nameLimit ?? (asked > 0 ? min(asked, Self.maximumNameBytes) : Self.maximumNameBytes)
        removeStalePartialFiles()
    }

    /// What opening `path` would refuse, found without making anything: a file (not a directory) there, a directory
    /// this user cannot write into, or a missing one whose nearest existing parent is not a directory or cannot take
    /// a new one. A command checks this before it touches Bluetooth, and makes the directory once Bluetooth works.
    package static func precheck(_ path: FilePath) throws(OutputDirectoryError) {
        var status = stat()
        if stat(path.string, &status) == 0 {
            guard status.st_mode & S_IFMT == S_IFDIR else { throw .notADirectory(path.string) }
            guard access(path.string, W_OK | X_OK) == 0 else { throw .notWritable(path.string, Errno(rawValue: errno)) }
            return
        }
        var parent = path.removingLastComponent()
        while !parent.isEmpty, stat(parent.string, &status) != 0 {
            let up = parent.removingLastComponent()
            if up == parent { break }
            parent = up
        }
        let existing = parent.isEmpty ? "." : parent.string
        guard stat(existing, &status) == 0, status.st_mode & S_IFMT == S_IFDIR else {
            throw .cannotCreate(path.string, reason: "\(existing) is not a directory")
        }
        guard access(existing, W_OK | X_OK) == 0 else {
            throw .cannotCreate(path.string, reason: String(describing: Errno(rawValue: errno)) + " (in \(existing))")
        }
    }

    /// Why FileManager failed, as strerror words it ("No such file or directory"), not Foundation's sentence.
    static func reason(_ error: any Error) -> String {
        let nsError = error as NSError
        if let underlying = nsError.userInfo[NSUnderlyingErrorKey] as? NSError, underlying.domain == NSPOSIXErrorDomain {
            return String(describing: Errno(rawValue: Int32(underlying.code)))
        }
        if nsError.domain == NSPOSIXErrorDomain { return String(describing: Errno(rawValue: Int32(nsError.code))) }
        let code: Int32? = switch (error as? CocoaError)?.code {
        case .fileNoSuchFile?, .fileReadNoSuchFile?: ENOENT
        case .fileWriteNoPermission?, .fileReadNoPermission?: EACCES
        case .fileWriteVolumeReadOnly?: EROFS
        case .fileWriteOutOfSpace?: ENOSPC
        case .fileWriteFileExists?: EEXIST
        default: nil
        }
        return code.map { String(describing: Errno(rawValue: $0)) } ?? error.localizedDescription
    }

    /// The extended attribute holding the authenticated sender's key line (`getfattr -n user.bletransfer.sender FILE`).
    package static let senderAttribute = "user.bletransfer.sender"

    /// Writes `payload` as a new file named after `baseName` and returns its path. The file appears complete or not
    /// at all, and never replaces one: `baseName` is sanitized (``sanitizedFileName(_:)``) and, when the name is
    /// taken, numbered (``numbered(_:_:)``). A `baseName` with `/` is a path relative to this directory (a file of a
    /// tree the sender sent): ``sanitizedRelativePath(_:)`` makes each component safe, and the directories are
    /// created (or entered) one at a time without following a symbolic link, so the file lands inside this directory
    /// whatever the name or the directory's contents say. `sender`: the authenticated sender's public key line,
    /// stored as `senderAttribute` with the file where the file system supports user extended attributes.
    /// `modificationTime`: the file's mtime, set before the name appears (see ``acceptedModificationTime``).
    ///
    /// The writes, flushes and links run on ``BlockingCalls/storage``, never on the cooperative pool, in the order
    /// that keeps a crash from showing a part: data, flush, name, flush of the directory. A task cancelled meanwhile
    /// still waits for them (the caller must know whether the message was stored).
    @discardableResult
    package func store(_ payload: some Collection<UInt8>, baseName: String,
                      sender: String? = nil, modificationTime: timespec? = nil) async throws(OutputDirectoryError) -> FilePath {
        let (directory, payload) = (self, MessagePayload(Array(payload)))
        return try await BlockingCalls.run { () throws(OutputDirectoryError) in
            try directory.storeBlocking(payload, baseName: baseName, sender: sender, modificationTime: modificationTime)
        }
    }

    /// ``store(_:baseName:sender:modificationTime:)`` blocking the calling thread until the file and its name are on
    /// disk: for ``BlockingCalls`` and threads of their own (the benchmarks'), never the cooperative pool. A payload in
    /// one of this directory's partial files (``partialFiles(from:)``) is linked to its name where it lies: no copy,
    /// whatever its size.
    package func storeBlocking(_ payload: MessagePayload, baseName: String,
                               sender: String? = nil, modificationTime: timespec? = nil) throws(OutputDirectoryError) -> FilePath {
        let partial: FilePath
        // Keeps the partial file open (and, released, removes its partial name) until linked.
        var received: PayloadFile?
        if let file = payload.file, isPartialFile(file) {
            received = file
            partial = FilePath(file.path)
            do {
                try Self.finish(file.descriptor, sender: sender, modificationTime: modificationTime)
            } catch { throw .writeFailed(path.string, error) }
        } else {
            partial = path.appending(Self.partialPrefix + UUID().uuidString)
            do {
                let fd = try FileDescriptor.open(
                    partial, .writeOnly, options: [.create, .exclusiveCreate, .closeOnExec],
                    permissions: [.ownerReadWrite, .groupRead, .otherRead])
                do {
                    try fd.closeAfter {
                        try Self.write(payload, to: fd)
                        try Self.finish(fd.rawValue, sender: sender, modificationTime: modificationTime)
                    }
                } catch {
                    _ = unlink(partial.string)
                    throw error
                }
            } catch let error as Errno {
                throw .writeFailed(path.string, error)
            } catch { throw .writeFailed(path.string, .ioError) }
        }
        defer {
            if received == nil { _ = unlink(partial.string) }
            received = nil
        }

        let (directories, fileName) = Self.sanitizedRelativePath(baseName)
        let safeBase = fileName ?? "message"
        let (parent, relativeDirectory) = try openDirectories(directories)
        defer { _ = close(parent) }
        for attempt in 0..<10_000 {
            let name = attempt == 0 ? safeBase : Self.numbered(safeBase, attempt)
            guard name.utf8.count <= nameLimit else { throw .nameRefused(path.string, name, .fileNameTooLong) }
            if linkat(AT_FDCWD, partial.string, parent, name, 0) == 0 {
                _ = fsync(parent)
                return relativeDirectory.reduce(path) { $0.appending($1) }.appending(name)
            }
            let error = Errno(rawValue: errno)
            if Self.refusesName(error) { throw .nameRefused(path.string, name, error) }
            if error != .fileExists { throw .writeFailed(path.string, error) }
        }
        throw .noFreeName(path.string, safeBase)
    }

    /// Writes a payload to a new file, piece by piece when it is read from a file.
    private static func write(_ payload: MessagePayload, to fd: FileDescriptor) throws {
        guard payload.file != nil else {
            _ = try fd.writeAll(payload.loadedBytes())
            return
        }
        var offset = 0
        while offset < payload.count {
            let piece = try payload.bytes(in: offset..<min(payload.count, offset + (1 << 20)))
            _ = try fd.writeAll(piece)
            offset += piece.count
        }
    }

    /// Sender's key and mtime, then data on disk, before the name: a crash must not leave a name over an empty file.
    private static func finish(_ fd: Int32, sender: String?, modificationTime: timespec?) throws(Errno) {
        if let sender {
            // Best effort: tmpfs before Linux 6.6 and some mounts lack user xattrs; the event and log name the sender.
            _ = Array(sender.utf8).withUnsafeBytes { bytes in
                fsetxattr(fd, Self.senderAttribute, bytes.baseAddress, bytes.count, 0)
            }
        }
        if let modificationTime {
            // The access time stays the arrival time; only the mtime is the sender's. Best effort: a file system that
            // cannot hold the time (FAT before 1980) must not cost the message; it keeps its arrival time.
            let times = [timespec(tv_sec: 0, tv_nsec: Self.timeOmitted), modificationTime]
            _ = futimens(fd, times)
        }
        guard fsync(fd) == 0 else { throw Errno(rawValue: errno) }
    }

    private func isPartialFile(_ file: PayloadFile) -> Bool {
        let candidate = FilePath(file.path)
        return file.removesPathWhenReleased && candidate.removingLastComponent() == path
            && candidate.lastComponent?.string.hasPrefix(Self.partialPrefix) == true
    }

    /// Partial files here for framed messages of at least `threshold` bytes, written as they come and linked to their
    /// names once verified. Smaller ones stay in memory (a file costs a flush either way; memory is faster).
    package func partialFiles(from threshold: UInt64 = OutputDirectory.partialFileThreshold) -> any PartialPayloadStore {
        PartialFiles(directory: path, threshold: threshold)
    }

    /// Messages from 256 KiB up come into a partial file, not memory.
    package static let partialFileThreshold: UInt64 = 256 * 1024

    /// Partial files named `.bletransfer-partial-UUID` in `directory`, for messages of at least
    /// `threshold` bytes; also a single-file sink's, beside its target.
    struct PartialFiles: PartialPayloadStore {
        let directory: FilePath
        let threshold: UInt64

        func makePartialFile(length: UInt64) throws(PayloadReadError) -> PayloadFile? {
            guard length >= threshold else { return nil }
            let partial = directory.appending(OutputDirectory.partialPrefix + UUID().uuidString).string
            let fd = open(partial, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)
            guard fd >= 0 else {
                throw PayloadReadError("cannot create a partial file in '\(directory.string)': \(Errno(rawValue: errno))")
            }
            return PayloadFile(descriptor: fd, path: partial, removesPathWhenReleased: true)
        }
    }

    /// The most directories a received path may nest; the file goes into the deepest one allowed.
    package static let maximumDepth = 32

    /// A relative path the sender gave, made safe component by component: each one as ``sanitizedFileName(_:)`` makes
    /// a name (so never `.`, `..`, hidden, an option, or with control or invisible characters); empty components and
    /// those with nothing left are dropped, so `../../etc/passwd` is `etc/passwd` and `/abs/x` is `abs/x`. At most
    /// ``maximumDepth`` directories are kept. The file name is nil when the last component leaves nothing (the
    /// caller's generated name is used).
    package static func sanitizedRelativePath(_ name: String) -> (directories: [String], file: String?) {
        let components = name.split(separator: "/", omittingEmptySubsequences: true).map(String.init)
        guard let last = components.last else { return ([], nil) }
        let directories = components.dropLast().compactMap(sanitizedFileName)
        return (Array(directories.prefix(maximumDepth)), sanitizedFileName(last))
    }

    /// Opens this directory and, under it, each of `components` in turn, creating what is missing. A component that
    /// exists as anything but a directory (a file, a symbolic link) is passed by for a numbered variant (`docs` →
    /// `docs-1`), never followed or replaced. Returns the innermost directory's descriptor (the caller closes it) and
    /// the components as used.
    private func openDirectories(_ components: [String]) throws(OutputDirectoryError) -> (Int32, [String]) {
        var current = open(path.string, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard current >= 0 else { throw .writeFailed(path.string, Errno(rawValue: errno)) }
        var used: [String] = []
        for component in components {
            var entered: Int32 = -1
            for attempt in 0..<100 where entered < 0 {
                let name = attempt == 0 ? component : Self.numbered(component, attempt)
                guard name.utf8.count <= nameLimit else { break }
                if mkdirat(current, name, 0o755) != 0 && errno != EEXIST {
                    let error = Errno(rawValue: errno)
                    _ = close(current)
                    if Self.refusesName(error) { throw .nameRefused(path.string, name, error) }
                    throw .writeFailed(path.string, error)
                }
                let next = openat(current, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                if next >= 0 {
                    entered = next
                    used.append(name)
                } else if errno != ENOTDIR && errno != ELOOP {
                    let error = Errno(rawValue: errno)
                    _ = close(current)
                    throw .writeFailed(path.string, error)
                }
            }
            _ = close(current)
            guard entered >= 0 else {
                throw .nameRefused(path.string, (used + [component]).joined(separator: "/"), .fileExists)
            }
            current = entered
        }
        return (current, used)
    }

    /// Errors with which a file system refuses a name rather than the write: too long for it
    /// (eCryptfs takes 143 bytes), a byte sequence or character it cannot hold (exFAT, VFAT).
    static func refusesName(_ error: Errno) -> Bool {
        error == .fileNameTooLong || error == .illegalByteSequence || error == .invalidArgument
    }

    /// `UTIME_OMIT` of <sys/stat.h> (`futimens` leaves that time as it is): a macro Swift does not import.
    static let timeOmitted = (1 << 30) - 2

    /// The sender's mtime for ``store(_:baseName:sender:modificationTime:)``, or nil outside 1970-01-01 ... one day
    /// after `now` (a clock far off, or a hostile value): the file then keeps its arrival time.
    package static func acceptedModificationTime(seconds: Int64, nanoseconds: UInt32, now: Date = Date()) -> timespec? {
        let latest = Int64(now.timeIntervalSince1970) + 86_400
        guard seconds >= 0, seconds <= latest, nanoseconds < 1_000_000_000 else { return nil }
        return timespec(tv_sec: Int(seconds), tv_nsec: Int(nanoseconds))
    }

    /// Removes partial files left by an interrupted run; they never had a final name.
    package func removeStalePartialFiles() {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path.string) else { return }
        for name in names where name.hasPrefix(Self.partialPrefix) {
            _ = unlink(path.appending(name).string)
        }
    }

    /// The longest file name Linux file systems take, in bytes of UTF-8 (NAME_MAX).
    package static let maximumNameBytes = 255
    /// An extension longer than this (bytes, with its dot) is likely none: not kept whole when a name is cut.
    static let maximumExtensionBytes = 32

    /// A name the sender chose (or one we generated) made into a single safe path component:
    /// - `/` and NUL, and every character ``SafeText`` escapes (C0 and C1 controls, ESC, DEL, bidirectional overrides
    ///   and marks, line and paragraph separators), become `_`;
    /// - leading dots are removed: nothing hidden, never `.` or `..`, never our partial prefix;
    /// - NFC: one spelling on disk for what looks the same (a decomposed "é" from another system is stored
    ///   precomposed);
    /// - invisible characters (zero-width spaces and joiners, the word joiner, the byte-order mark, soft hyphens,
    ///   Hangul fillers…) become `_`, so two names that look alike are told apart on screen;
    /// - a leading `-` becomes `_`: the name is never read as an option by `rm`, `ls`…;
    /// - at most 255 bytes of UTF-8, cut at a character (Unicode scalar) boundary before the extension, which is kept.
    ///
    /// A name that is already safe comes back unchanged. Nil when nothing is left (empty, or only dots): the caller
    /// uses its generated name.
    package static func sanitizedFileName(_ name: String) -> String? {
        var scalars = String.UnicodeScalarView()
        for scalar in name.precomposedStringWithCanonicalMapping.unicodeScalars {
            // Scalars, not Characters: "." with a combining mark is one Character, but a leading dot on disk.
            if scalars.isEmpty && scalar == "." { continue }
            let unsafe = scalar == "/" || scalar == "\0" || SafeText.needsEscape(scalar) || isInvisible(scalar)
            scalars.append(unsafe ? "_" : scalar)
        }
        guard let first = scalars.first else { return nil }
        if first == "-" { scalars.replaceSubrange(scalars.startIndex...scalars.startIndex, with: ["_"]) }
        return fitted(String(scalars), suffix: "")
    }

    /// Characters that take no room on screen (format and filler characters ``SafeText`` does not escape).
    static func isInvisible(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x00AD, 0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180E, 0x200B...0x200D, 0x2060...0x2064,
             0x206A...0x206F, 0x3164, 0xFEFF, 0xFFA0:
            return true
        default: return false
        }
    }

    /// The name for the `number`th retry when `name` is taken: the number before the extension, after a dash
    /// ("photo.jpg" → "photo-1.jpg", "notes" → "notes-1", "message-20250101-120000-1.txt" →
    /// "message-20250101-120000-1-1.txt"), the stem cut to stay within 255 bytes. Sent and generated names alike.
    static func numbered(_ name: String, _ number: Int) -> String { fitted(name, suffix: "-\(number)") }

    /// `name` with `suffix` before its extension, the stem cut at a scalar boundary to fit ``maximumNameBytes``
    /// (`name` holds no leading dot, so the stem is never empty).
    private static func fitted(_ name: String, suffix: String) -> String {
        let scalars = Array(name.unicodeScalars)
        var stem = scalars[...]
        var fileExtension: ArraySlice<Unicode.Scalar> = []
        if let dot = scalars.lastIndex(of: "."), dot > 0 {
            let candidate = scalars[dot...]
            if String(String.UnicodeScalarView(candidate)).utf8.count <= maximumExtensionBytes {
                stem = scalars[..<dot]
                fileExtension = candidate
            }
        }
        let budget = maximumNameBytes - suffix.utf8.count - String(String.UnicodeScalarView(fileExtension)).utf8.count
        var stemBytes = 0
        var kept = String.UnicodeScalarView()
        for scalar in stem {
            let width = String(scalar).utf8.count
            guard stemBytes + width <= budget else { break }
            stemBytes += width
            kept.append(scalar)
        }
        kept.append(contentsOf: suffix.unicodeScalars)
        kept.append(contentsOf: fileExtension)
        return String(kept)
    }
}

package enum OutputDirectoryError: Error, Sendable, Equatable, CustomStringConvertible {
    case notADirectory(String)
    case cannotCreate(String, reason: String)
    case notWritable(String, Errno)
    case writeFailed(String, Errno)
    case noFreeName(String, String)
    /// The file system refused the name itself (too long for it, a character it cannot hold).
    case nameRefused(String, String, Errno)

    package var description: String {
        switch self {
        case .notADirectory(let path): "\(path) exists and is not a directory"
        case .cannotCreate(let path, let reason): "cannot create directory \(path): \(reason)"
        case .notWritable(let path, let errno): "cannot write into \(path): \(errno)"
        case .writeFailed(let path, let errno): "writing a message into \(path) failed: \(errno)"
        case .noFreeName(let path, let base): "no free file name for \(base) in \(path)"
        case .nameRefused(let path, let name, let errno): "the file system of \(path) refuses the name \(name): \(errno)"
        }
    }
}
