#if canImport(Glibc)
import Glibc
import SystemPackage
import SystemCalls
import Transfer

/// The sender daemon's queue: a directory whose regular files are messages to send.
///
/// - Order: oldest modification time first, ties broken by file name (byte order).
/// - Ignored: names starting with `.`, names ending in `.part`, `.partial`, `.tmp`, `.temp`, `.swp`, `.crdownload`,
///   `.filepart` or `~`, and anything that is not a regular file (subdirectories such as `sent/` and `failed/`,
///   symbolic links, pipes).
/// - Complete at once: a file the directory watcher saw moved in (written elsewhere, then renamed in) or closed after
///   writing, and not changed since, is offered without waiting.
/// - Still being written: any other file whose status changed (`ctime`: every write, rename or chmod) less than
///   `settleTime` ago waits. Users should still drop files in atomically — write them elsewhere on the same file system
///   (or under a dot-name in the outbox) and `mv` them in — because a writer that pauses longer than `settleTime` would
///   otherwise be read early.
/// - Delivered files are moved into `sent/`, files that can never be sent (over `maxFileSize`, empty, unreadable) into
///   `failed/` with a `NAME.reason` file; neither move replaces an existing file (a `-1`, `-2`… suffix is added).
/// - State is only the file system: a new `Outbox` on the same directory (after a restart) serves exactly the files not
///   yet moved to `sent/`. Only a crash between the peer's acknowledgement and the move can make a file go out twice.
/// - A file being served is locked (`flock`), so two daemons sharing one outbox never serve the same file at once.
/// - Held by descriptor: the directory and its `sent/` and `failed/` are opened once (`O_DIRECTORY | O_NOFOLLOW`,
///   ``HeldDirectory``) and everything is done relative to them (`openat`, `fstatat(AT_SYMLINK_NOFOLLOW)`, `renameat`),
///   so a member of the group who swaps a folder for a symbolic link (`renameat2(RENAME_EXCHANGE)`) cannot make the
///   daemon read, send or move anything outside. Before each listing the folder's name is checked to lead to the
///   directory held (device and inode); when it does not, the outbox refuses to serve (`OutboxError.replaced`) until a
///   new one is opened on whatever the name holds then.
package actor Outbox {
    package nonisolated let directory: FilePath
    package nonisolated let sentDirectory: FilePath
    package nonisolated let failedDirectory: FilePath
    /// Largest file served; larger ones go to `failed/`.
    package nonisolated let maxFileSize: Int
    /// How long a file must be left alone before it is served.
    package nonisolated let settleTime: Duration
    /// How often the directory is rescanned unprompted: rarely with inotify (a safety net), often without.
    package nonisolated let rescanInterval: Duration
    /// False when inotify could not be set up and changes are found by rescanning only.
    package nonisolated var watchesChanges: Bool { watcher != nil }

    /// The outbox directory itself and its two subdirectories (reopened when their names were swapped: `usable(_:)`).
    package nonisolated let folder: HeldDirectory
    private var sent: HeldDirectory
    private var failed: HeldDirectory

    private nonisolated let changes = ChangeSignal()
    private nonisolated let watcher: DirectoryWatcher?
    /// Files the watcher saw moved in or closed after writing: offered without settling.
    private nonisolated let completed = CompletedNames()
    private nonisolated let report: @Sendable (OutboxNotice) -> Void
    private nonisolated let clock: @Sendable () -> FileTime

    /// Files this instance serves, by identity, with the locked descriptor.
    private var claims: [FileIdentity: FileDescriptor] = [:]
    /// Bad files that could not be moved to `failed/`, skipped until their status changes.
    private var skipped: Set<FileIdentity> = []
    /// The last full listing, reused by `next()` while the watcher saw no arrival (`currentCandidates`); nil unwatched.
    private var listing: Listing?
    /// How many times the directory was read and every entry examined (tests check a drain does not list per message).
    private(set) var fullListings = 0

    /// How long `next()` may reuse a listing: a safety net where the watcher misses changes (a remote-written share).
    package static let defaultListingReuseLimit: Duration = .seconds(10)
    private nonisolated let listingReuseLimit: Duration

    package static let defaultSettleTime: Duration = .seconds(2)
    static let ignoredSuffixes = [".part", ".partial", ".tmp", ".temp", ".swp", ".crdownload", ".filepart", "~"]

    /// Opens the outbox, making it and `sent/` and `failed/` when missing; `report` hears of files failed or skipped.
    /// `clock` stands in for the wall clock in settle-time tests; `watchChanges: false` tests the rescan standing in
    /// for a missing inotify; a longer `listingReuseLimit` lets a listing-reuse test run slowly (a loaded machine).
    package init(
        directory: FilePath, maxFileSize: Int, settleTime: Duration = Outbox.defaultSettleTime,
        rescanInterval: Duration? = nil, report: @escaping @Sendable (OutboxNotice) -> Void = { _ in },
        clock: @escaping @Sendable () -> FileTime = FileTime.now, watchChanges: Bool = true,
        listingReuseLimit: Duration = Outbox.defaultListingReuseLimit
    ) throws(OutboxError) {
        try self.init(folder: try Self.prepare(directory, in: nil), maxFileSize: maxFileSize, settleTime: settleTime,
                      rescanInterval: rescanInterval, report: report, clock: clock, watchChanges: watchChanges,
                      listingReuseLimit: listingReuseLimit)
    }

    /// The outbox of the folder `name` in `parent` (`outbox/NAME/`, a peer's), opened by `parent`'s descriptor: a
    /// symbolic link there is refused (`notADirectory`), not followed. Files wait, settle, move as the parent's.
    package init(folder name: String, in parent: Outbox,
                report: @escaping @Sendable (OutboxNotice) -> Void = { _ in }) throws(OutboxError) {
        try self.init(folder: try Self.prepare(parent.directory.appending(name), in: (name, parent.folder)),
                      maxFileSize: parent.maxFileSize, settleTime: parent.settleTime, rescanInterval: nil,
                      report: report, clock: parent.clock, watchChanges: true,
                      listingReuseLimit: Outbox.defaultListingReuseLimit)
    }

    private init(
        folder: HeldDirectory, maxFileSize: Int, settleTime: Duration, rescanInterval: Duration?,
        report: @escaping @Sendable (OutboxNotice) -> Void, clock: @escaping @Sendable () -> FileTime,
        watchChanges: Bool, listingReuseLimit: Duration
    ) throws(OutboxError) {
        self.listingReuseLimit = listingReuseLimit
        self.folder = folder
        self.directory = folder.path
        self.sentDirectory = folder.path.appending("sent")
        self.failedDirectory = folder.path.appending("failed")
        self.maxFileSize = max(0, maxFileSize)
        self.settleTime = max(.zero, settleTime)
        self.report = report
        self.clock = clock
        sent = try Self.prepare(sentDirectory, in: ("sent", folder))
        failed = try Self.prepare(failedDirectory, in: ("failed", folder))
        let watched = folder.watchPath
        let watcher = watchChanges
            ? DirectoryWatcher(directory: watched.path, signal: changes, completed: completed, followsName: watched.followsName)
            : nil
        self.watcher = watcher
        self.rescanInterval = rescanInterval ?? (watcher == nil ? .seconds(2) : .seconds(60))
    }

    /// Whether this outbox's name still leads to the directory it holds (see ``HeldDirectory``).
    package nonisolated var isStillInPlace: Bool { (try? folder.isStillNamed()) ?? false }

    deinit {
        for fd in claims.values { try? fd.close() }
    }

    // MARK: Serving

    /// The first file ready to send, now; nil when there is none. The file stays claimed by this instance (and
    /// returned again by later calls) until `markDelivered` or `release`.
    ///
    /// A daemon draining its outbox in one session calls this once per message, so it reuses the previous listing
    /// while nothing arrived instead of examining every waiting file again: on a slow file system (a network share)
    /// that examination, one `lstat` per waiting file, was most of the time between two messages.
    package func next() throws(OutboxError) -> OutboxFile? { try scan(reusingListing: true).file }

    /// The first file ready to send other than `held` (files this instance claimed and has not delivered yet), now;
    /// nil when there is none. All stay claimed: a session that sends the next file while the last awaits its ACK,
    /// and prepares the one after, keeps other daemons off each.
    package func next(after held: [OutboxFile]) throws(OutboxError) -> OutboxFile? {
        try scan(reusingListing: true, keeping: Set(held.map { FileIdentity($0) })).file
    }

    /// Waits until a file is ready and returns it (see `next`). Wakes on directory changes and when a file still
    /// settling becomes ready; throws `CancellationError` when the task is cancelled.
    package func waitForFile() async throws -> OutboxFile {
        while true {
            try Task.checkCancellation()
            let seen = changes.generation
            // Always a full listing here: it is also the periodic look for changes the watcher cannot see.
            let result = try scan(reusingListing: false)
            if let file = result.file { return file }
            var timeout = rescanInterval
            if let settlesAt = result.nextSettleTime {
                timeout = min(timeout, max(.milliseconds(1), settlesAt - clock()))
            }
            await changes.wait(after: seen, timeout: timeout)
        }
    }

    /// Moves a delivered file into `sent/` (never over an existing file) and drops the claim. Returns its new path,
    /// or nil when the outbox no longer holds that file (removed or replaced by another file of the same name while
    /// it was being sent).
    ///
    /// Returns once the file is renamed; the two directories are flushed on ``BlockingCalls/storage`` without waiting
    /// for it. A session draining the outbox moves a file per ACK while the next is on the air, and waiting for the
    /// disk there left the link idle. The flush only matters to a power cut in the next moments, after which the file
    /// is in the outbox again and sent again: the receiver's receipt journal answers it as already stored (a sender
    /// killed between the ACK and the move does the same).
    @discardableResult
    package func markDelivered(_ file: OutboxFile) async throws(OutboxError) -> FilePath? {
        defer { dropClaim(FileIdentity(file)) }
        guard let status = folder.status(of: file.name), FileIdentity(status) == FileIdentity(file) else { return nil }
        let name: String
        do {
            let into = try usable(&sent, "sent")
            name = try NoReplaceMove.moveAvoidingNames(file.name, in: folder.descriptor, into: into.descriptor)
        } catch { throw .moveFailed(from: file.path.string, to: sentDirectory.string, error) }
        forgetListed(FileIdentity(file))
        NoReplaceMove.startSyncingDirectories(descriptors: [sent.descriptor, folder.descriptor])
        return sentDirectory.appending(name)
    }

    /// `held` (`sent/` or `failed/`), opened again when its name no longer leads to it: what
    /// the name holds now, if it is a directory (made when missing), never a symbolic link.
    private func usable(_ held: inout HeldDirectory, _ name: String) throws(Errno) -> HeldDirectory {
        if (try? held.isStillNamed()) == true { return held }
        held = try HeldDirectory.open(name, in: folder, create: true)
        return held
    }

    /// The watcher's count of changes seen (arrivals, folders made or moved in included):
    /// unchanged, nothing new appeared. Tests wait on it instead of sleeping.
    package nonisolated var changeGeneration: UInt64 { changes.generation }

    /// Returns once the watcher saw a change after `generation`, or after `timeout`.
    package nonisolated func waitForChange(after generation: UInt64, timeout: Duration) async {
        await changes.wait(after: generation, timeout: timeout)
    }

    /// Gives up the claim on a file that was not delivered; it stays in the outbox.
    package func release(_ file: OutboxFile) { dropClaim(FileIdentity(file)) }

    /// The waiting files' names, in serving order (settling ones and bad ones not yet moved included).
    package func pendingFileNames() throws(OutboxError) -> [String] { try candidates().map(\.name) }

    /// A listing and the watcher's generation read before it was taken.
    private struct Listing {
        var candidates: [Candidate]
        let generation: UInt64
        let takenAt: ContinuousClock.Instant
    }

    /// The waiting files, from a fresh listing or (`reusable`) from the last one while it is still true: the watcher
    /// signalled nothing since (it reports arrivals, writes and attribute changes, not departures, so our own moves
    /// to `sent/` keep it valid) and it is not older than `listingReuseLimit`. Whatever changed in a listed file
    /// since is caught when it is claimed (`claimAndRead` compares its change time); a file gone is skipped.
    private func currentCandidates(reusable: Bool) throws(OutboxError) -> (candidates: [Candidate], reused: Bool) {
        if reusable, let listing, listing.generation == changes.generation,
           ContinuousClock.now - listing.takenAt < listingReuseLimit {
            return (listing.candidates, true)
        }
        // Read before listing: a change during the listing makes the next call list again.
        let generation = changes.generation
        let found = try candidates()
        fullListings += 1
        listing = watcher == nil ? nil : Listing(candidates: found, generation: generation, takenAt: .now)
        return (found, false)
    }

    /// Drops a file that left the outbox through us from the reusable listing.
    private func forgetListed(_ identity: FileIdentity) {
        listing?.candidates.removeAll { $0.identity == identity }
    }

    // MARK: Scanning

    private struct Candidate {
        let name: String
        let identity: FileIdentity
        let size: Int
        let modified: FileTime
        let changed: FileTime
    }

    private func candidates() throws(OutboxError) -> [Candidate] {
        // The folder must still be where it was found: a name swapped for a link (or directory) is not served from.
        let inPlace: Bool
        do { inPlace = try folder.isStillNamed() } catch { throw .cannotList(directory.string, error) }
        guard inPlace else { throw .replaced(directory.string) }
        let entries: [DirectoryEntry]
        do {
            entries = try DirectoryEntry.list(descriptor: folder.descriptor)
        } catch { throw .cannotList(directory.string, error) }
        var found: [Candidate] = []
        for entry in entries {
            let name = entry.name
            guard !Self.isIgnoredName(name), entry.type == UInt8(DT_REG) || entry.type == UInt8(DT_UNKNOWN),
                  let status = folder.status(of: name), status.st_mode & S_IFMT == S_IFREG
            else { continue }
            found.append(Candidate(
                name: name, identity: FileIdentity(status), size: Int(status.st_size),
                modified: FileTime(status.st_mtim), changed: FileTime(status.st_ctim)))
        }
        return found.sorted { a, b in
            a.modified != b.modified ? a.modified < b.modified : a.name.utf8.lexicographicallyPrecedes(b.name.utf8)
        }
    }

    /// `keeping`: claimed files that are skipped and keep their claims (see `next(after:)`).
    private func scan(reusingListing: Bool, keeping: Set<FileIdentity> = []) throws(OutboxError)
        -> (file: OutboxFile?, nextSettleTime: FileTime?) {
        let (found, reused) = try currentCandidates(reusable: reusingListing)
        let result = scan(found, keeping: keeping)
        if reused, result.file == nil {
            // The reused listing offers nothing (drained, files left or changed): look at the directory first.
            return scan(try currentCandidates(reusable: false).candidates, keeping: keeping)
        }
        return result
    }

    private func scan(_ found: [Candidate], keeping: Set<FileIdentity> = []) -> (file: OutboxFile?, nextSettleTime: FileTime?) {
        let now = clock()
        var nextSettleTime: FileTime?
        // Forget claims and skips of files that are gone or changed.
        let present = Set(found.map(\.identity))
        for identity in claims.keys where !present.contains(identity) { dropClaim(identity) }
        skipped = skipped.intersection(present)

        for candidate in found {
            if skipped.contains(candidate.identity) || keeping.contains(candidate.identity) { continue }
            let settlesAt = candidate.changed + settleTime
            // A change time far in the future means the clock was set back; waiting for it could take forever. A file
            // moved in or closed after writing, and not changed since, is complete: it goes at once.
            if now < settlesAt && settlesAt - now <= settleTime
                && !completed.isComplete(candidate.name, changedAt: candidate.changed) {
                nextSettleTime = min(nextSettleTime ?? settlesAt, settlesAt)
                continue
            }
            if candidate.size > maxFileSize {
                quarantine(candidate, reason: "\(candidate.size) bytes is over the limit of \(maxFileSize) bytes")
                continue
            }
            if candidate.size == 0 {
                quarantine(candidate, reason: "the file is empty, and an empty message cannot be sent")
                continue
            }
            switch Result(catching: { () throws(Refusal) in try claimAndRead(candidate) }) {
            case .success(let file):
                // One file at a time: moving on from a file gives it up for other daemons.
                for identity in claims.keys where identity != candidate.identity && !keeping.contains(identity) {
                    dropClaim(identity)
                }
                return (file, nil)
            case .failure(.busy): continue
            case .failure(.gone): forgetListed(candidate.identity)
            case .failure(.changed):
                listing = nil   // Its size and times are stale: list again next time.
                nextSettleTime = min(nextSettleTime ?? now + settleTime, now + settleTime)
            case .failure(.unusable(let reason)): quarantine(candidate, reason: reason)
            }
        }
        return (nil, nextSettleTime)
    }

    /// Why a listed file is not offered now.
    private enum Refusal: Error {
        /// Locked by another process.
        case busy
        /// No longer in the outbox under that name (delivered by another daemon, removed).
        case gone
        /// Modified while it was read: try again once it settled.
        case changed
        case unusable(String)
    }

    /// Locks the candidate, checks that it is still the file listed and fit to send, and reads its digest: the file to
    /// offer, or why not. A descriptor that was not claimed before is closed again on every way out but the file's.
    private func claimAndRead(_ candidate: Candidate) throws(Refusal) -> OutboxFile {
        let (fd, ownsDescriptor) = try lockedDescriptor(for: candidate)
        do {
            let file = try readForSending(fd, candidate, status: try sendableStatus(of: fd, listedAs: candidate))
            claims[candidate.identity] = fd
            return file
        } catch {
            if ownsDescriptor { try? fd.close() } else { dropClaim(candidate.identity) }
            throw error
        }
    }

    /// The candidate's descriptor, locked: the claim held, or the file opened and locked now (`owned`: ours to close).
    private func lockedDescriptor(for candidate: Candidate) throws(Refusal) -> (FileDescriptor, owned: Bool) {
        if let claimed = claims[candidate.identity] { return (claimed, false) }
        // Relative to the folder held; non-blocking so that a pipe swapped in after the listing cannot hang us;
        // no-follow so that a symbolic link swapped in cannot send another file.
        let opened = openat(folder.descriptor, candidate.name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard opened >= 0 else {
            let error = Errno(rawValue: errno)
            if error == .noSuchFileOrDirectory || error == .tooManySymbolicLinkLevels { throw .gone }
            throw .unusable("cannot open it: \(error)")
        }
        let fd = FileDescriptor(rawValue: opened)
        guard flock(fd.rawValue, LOCK_EX | LOCK_NB) == 0 else {
            try? fd.close()
            throw .busy
        }
        return (fd, true)
    }

    /// The locked file's status while it is the regular file listed under that name, unchanged, one link, in size.
    private func sendableStatus(of fd: FileDescriptor, listedAs candidate: Candidate) throws(Refusal) -> stat {
        // The name must still lead to the locked file: another daemon may have moved it to sent/ meanwhile.
        var before = stat()
        guard fstat(fd.rawValue, &before) == 0, before.st_mode & S_IFMT == S_IFREG,
              let byName = folder.status(of: candidate.name), FileIdentity(byName) == FileIdentity(before),
              FileIdentity(before) == candidate.identity
        else { throw .gone }
        // Changed since it was listed (a reused listing may be seconds old): it must settle again before it is read.
        guard FileTime(before.st_ctim) == candidate.changed else { throw .changed }
        // A hard link lets whoever can write the outbox (the service's group) have the daemon read and send a file they
        // cannot read themselves (its key, with fs.protected_hardlinks=0): only files with no other name are sent.
        guard before.st_nlink == 1 else {
            throw .unusable("it has \(before.st_nlink) hard links; copy it into the outbox instead of linking it")
        }
        guard Int(before.st_size) <= maxFileSize else {
            throw .unusable("\(before.st_size) bytes is over the limit of \(maxFileSize) bytes")
        }
        return before
    }

    /// The message over a second descriptor of the locked file, with its digest taken in one
    /// pass; `.changed` when its ctime or size moved meanwhile (it settles again first).
    private func readForSending(_ fd: FileDescriptor, _ candidate: Candidate, status before: stat) throws(Refusal) -> OutboxFile {
        let path = directory.appending(candidate.name)
        // The message reads its own descriptor as it is sent, from disk: any size, constant memory. A new open file
        // description of the file (a dup would share the claim's lock and hold it as long as the message lives).
        var duplicate = open("/proc/self/fd/\(fd.rawValue)", O_RDONLY | O_CLOEXEC)
        if duplicate < 0 {
            // No /proc (a bare container): the name in the folder held, checked below to be the same file.
            duplicate = openat(folder.descriptor, candidate.name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        }
        var reopened = stat()
        guard duplicate >= 0 else { throw .unusable("cannot read it: \(Errno(rawValue: errno))") }
        guard fstat(duplicate, &reopened) == 0, FileIdentity(reopened) == FileIdentity(before) else {
            _ = close(duplicate)
            throw .gone
        }
        let body = MessagePayload(file: PayloadFile(descriptor: duplicate, path: path.string), count: Int(before.st_size))
        let digest: [UInt8]
        do {
            digest = try body.sha256()
        } catch { throw .unusable("cannot read it: \(error)") }
        var after = stat()
        guard fstat(fd.rawValue, &after) == 0 else { throw .unusable("cannot read it: \(Errno(rawValue: errno))") }
        if FileTime(after.st_ctim) != FileTime(before.st_ctim) || after.st_size != before.st_size { throw .changed }
        return OutboxFile(
            name: candidate.name, path: path, body: body, digest: digest,
            modificationSeconds: Int64(after.st_mtim.tv_sec), modificationNanoseconds: UInt32(clamping: after.st_mtim.tv_nsec),
            device: candidate.identity.device, inode: candidate.identity.inode)
    }

    private func quarantine(_ candidate: Candidate, reason: String) {
        dropClaim(candidate.identity)
        forgetListed(candidate.identity)
        do {
            // Still the file listed (not one swapped in under its name since).
            guard let status = folder.status(of: candidate.name), FileIdentity(status) == candidate.identity else { return }
            let into = try usable(&failed, "failed")
            let name = try NoReplaceMove.moveAvoidingNames(candidate.name, in: folder.descriptor, into: into.descriptor)
            Self.writeReason(reason, for: name, in: into)
            // Queued, not awaited: a listing under way cannot wait without letting other calls
            // in midway. Lost in a power cut, the move is only made again.
            NoReplaceMove.startSyncingDirectories(descriptors: [into.descriptor, folder.descriptor])
            report(.quarantined(name: candidate.name, reason: reason, movedTo: failedDirectory.appending(name)))
        } catch .noSuchFileOrDirectory {
            return  // Removed meanwhile: nothing to do.
        } catch {
            skipped.insert(candidate.identity)
            report(.skipped(name: candidate.name, reason: "\(reason); moving it to \(failedDirectory) failed: \(error)"))
        }
    }

    /// `NAME.reason` beside the file moved into `failed`: a new file, created relative to the folder held and never
    /// through a symbolic link. One planted under that name first (a link, a file) is removed, not written through.
    private static func writeReason(_ reason: String, for name: String, in failed: HeldDirectory) {
        let reasonName = name + ".reason"
        var fd = openat(failed.descriptor, reasonName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        if fd < 0 && errno == EEXIST, unlinkat(failed.descriptor, reasonName, 0) == 0 {
            fd = openat(failed.descriptor, reasonName, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        }
        guard fd >= 0 else { return }
        let file = FileDescriptor(rawValue: fd)
        _ = try? file.closeAfter { try file.writeAll(Array((reason + "\n").utf8)) }
    }

    private func dropClaim(_ identity: FileIdentity) {
        if let fd = claims.removeValue(forKey: identity) { try? fd.close() }
    }

    static func isIgnoredName(_ name: String) -> Bool {
        name.isEmpty || name.hasPrefix(".") || ignoredSuffixes.contains { name.hasSuffix($0) }
    }

    /// Opens (making it when missing) the outbox directory at `path`, or the folder `name` in
    /// `parent`: a directory this process can write, never a symbolic link.
    private static func prepare(_ path: FilePath, in parent: (name: String, folder: HeldDirectory)?) throws(OutboxError) -> HeldDirectory {
        let held: HeldDirectory
        do {
            if let parent {
                held = try HeldDirectory.open(parent.name, in: parent.folder, create: true)
            } else { held = try HeldDirectory.open(path, create: true) }
        } catch .notDirectory {
            throw .notADirectory(path.string)
        } catch { throw .cannotCreate(path.string, error) }
        guard held.isWritable else { throw .notWritable(path.string, Errno(rawValue: errno)) }
        return held
    }
}

/// Device and inode: which file, whatever its name.
struct FileIdentity: Hashable, Sendable {
    let device: UInt64
    let inode: UInt64

    init(_ status: stat) {
        device = UInt64(status.st_dev)
        inode = UInt64(status.st_ino)
    }

    init(_ file: OutboxFile) {
        device = file.device
        inode = file.inode
    }
}

/// A file-system time stamp with nanoseconds.
package struct FileTime: Comparable, Sendable {
    let nanoseconds: Int128

    init(nanoseconds: Int128) { self.nanoseconds = nanoseconds }

    init(_ time: timespec) { nanoseconds = Int128(time.tv_sec) * 1_000_000_000 + Int128(time.tv_nsec) }

    @Sendable package static func now() -> FileTime {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return FileTime(time)
    }

    package static func < (a: FileTime, b: FileTime) -> Bool { a.nanoseconds < b.nanoseconds }

    static func + (time: FileTime, duration: Duration) -> FileTime {
        FileTime(nanoseconds: time.nanoseconds + duration.nanosecondsTotal)
    }

    static func - (a: FileTime, b: FileTime) -> Duration {
        .nanoseconds(Int64(clamping: a.nanoseconds - b.nanoseconds))
    }
}

extension Duration {
    var nanosecondsTotal: Int128 {
        let (seconds, attoseconds) = components
        return Int128(seconds) * 1_000_000_000 + Int128(attoseconds / 1_000_000_000)
    }
}
#endif
