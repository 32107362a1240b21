import DaemonSupport
import Foundation
import Machines
import Roles
import Storage
import SystemPackage
import SystemCalls
import Transfer

/// What the outbox-backed source did, for the daemon's log and status line.
enum OutboxSourceEvent: Sendable {
    case serving(OutboxFile)
    /// `file` was delivered and moved to `movedTo` (nil: it had left the outbox, e.g. removed by hand meanwhile).
    case moved(OutboxFile, movedTo: FilePath?)
    /// Delivered, but the move into `sent/` failed: it stays in the outbox and is sent again.
    case moveFailed(OutboxFile, OutboxError)
    /// The outbox could not be read; the source tries again after `retryIn`.
    case unreadable(OutboxError, retryIn: Duration)
    /// The outbox moved a file it can never send into `failed/`, or skipped it.
    case notice(OutboxNotice)
}

/// The sender daemon's `MessageSource`: the first file of the outbox is the current message; once the peripheral
/// counts it as delivered (framed ACK, or compat unsubscribe after `EOM`) it moves into `sent/` and the next file is
/// served. An empty outbox makes `current()` wait (inotify, no polling loop) until a file is ready.
///
/// Each sub-folder `NAME/` (other than `sent/`, `failed/` and hidden ones) is an outbox of its own whose files are
/// addressed to the authorized peer NAME (its name or fingerprint in the authorized-peers file): only that peer is
/// given them, and they move to `NAME/sent/`. Files at the top go to the first authorized peer that asks, and come
/// first. When a central is refused a message addressed to someone else, `message(for:)` offers it what is there for
/// it. New folders are found within `folderRescan` while the daemon waits.
///
/// Delivery is the only thing that moves a file: a transfer cut short (central gone, adapter off, bluetoothd
/// restarted, SIGTERM) leaves the file where it is, and the next `current()` — in this run or the next start of the
/// daemon — returns it again. The outbox itself holds no state but its files, so a restart serves exactly the files
/// not yet in `sent/`.
///
/// `current()` never ends the run by itself: nil is returned only when the calling task is cancelled (the peripheral
/// tearing down a poweredOn period, or the daemon stopping), where the caller discards the answer.
actor OutboxMessageSource: MessageSource {
    let outbox: Outbox
    private let report: @Sendable (OutboxSourceEvent) -> Void
    private let retryDelay: Duration
    /// `outbox/NAME/` by NAME: the files only the peer NAME is given.
    private var peerOutboxes: [String: Outbox] = [:]
    /// The file being offered and its prepared message (hashed once, not per subscription).
    private var serving: Served?
    /// Pipeline: the files after `serving`, in order, claimed and prepared while `serving` awaits its ACK (sent ahead,
    /// or prepared while the window is full: `upcomingNow`); `nextAvailableNow` gives the first once `serving` is done.
    private var prepared: [Served] = []
    private(set) var deliveredCount = 0
    /// When the peer folders were last listed, and the outbox watcher's generation then.
    private var foldersListed: (generation: UInt64, at: ContinuousClock.Instant)?
    /// How many times the peer folders were listed (tests check a drain does not list per message).
    private(set) var folderListings = 0

    /// How often the outbox is listed for new peer folders while the daemon waits for a file.
    static let folderRescan: Duration = .seconds(5)
    private let listingReuseLimit: Duration

    private struct Served: Sendable {
        let outbox: Outbox
        let file: OutboxFile
        let message: OutgoingMessage

        /// `addressee`: a folder's name, as NFC, as authorized-peers names are read (accents decomposed elsewhere match).
        init(_ file: OutboxFile, of outbox: Outbox, to addressee: String?) {
            self.outbox = outbox
            self.file = file
            // The outbox file's name travels with it (secure mode, when the receiver takes it).
            message = OutgoingMessage(body: file.body, digest: file.digest, file: SentFileAttributes(
                name: file.name, modificationSeconds: file.modificationSeconds,
                modificationNanoseconds: file.modificationNanoseconds), addressee: addressee?.precomposedStringWithCanonicalMapping)
        }
    }

    /// - Parameter retryDelay: the pause before reading an outbox again that could not be
    ///   listed (removed, permissions changed).
    /// - Parameter listingReuseLimit: how long a listing of the peer folders is reused while the
    ///   watcher reports nothing new (`folderRescan`; tests on a loaded machine lengthen it).
    init(outbox: Outbox, retryDelay: Duration = .seconds(5), listingReuseLimit: Duration = folderRescan,
         report: @escaping @Sendable (OutboxSourceEvent) -> Void = { _ in }) {
        self.outbox = outbox
        self.retryDelay = retryDelay
        self.listingReuseLimit = listingReuseLimit
        self.report = report
    }

    /// Opens (creating when missing) the outbox at `directory`; files over `maximumFileSize` or empty go to `failed/`.
    init(directory: FilePath, maximumFileSize: Int, settleTime: Duration = Outbox.defaultSettleTime,
         retryDelay: Duration = .seconds(5), listingReuseLimit: Duration = folderRescan,
         report: @escaping @Sendable (OutboxSourceEvent) -> Void = { _ in }) throws(OutboxError) {
        let outbox = try Outbox(directory: directory, maxFileSize: maximumFileSize, settleTime: settleTime,
                                report: { report(.notice($0)) })
        self.init(outbox: outbox, retryDelay: retryDelay, listingReuseLimit: listingReuseLimit, report: report)
    }

    func current() async -> OutgoingMessage? {
        while !Task.isCancelled {
            // A file prepared ahead for a session that ended is prepared again when its turn comes.
            prepared = []
            do {
                if let ready = try await readyNow(for: nil) { return adopt(ready) }
            } catch {
                report(.unreadable(error, retryIn: retryDelay))
                do { try await Task.sleep(for: retryDelay) } catch { return nil }
                continue
            }
            if let arrived = await waitForAnyFile() { return adopt(arrived) }
        }
        return nil
    }

    /// The first ready outbox file, without waiting (a multi session's next). One prepared while the last awaited its
    /// ACK comes first whatever arrived: it may be on the air already, and is not read or hashed again.
    func nextAvailableNow() async -> OutgoingMessage? {
        guard !Task.isCancelled else { return nil }
        if !prepared.isEmpty { return adopt(prepared.removeFirst()) }
        do {
            return try await readyNow(for: nil).map(adopt)
        } catch {
            report(.unreadable(error, retryIn: retryDelay))
            return nil
        }
    }

    /// The file after the one being served and the `sentAhead` after it, in the same folder,
    /// ready now (pipeline): prepared (claimed, read, hashed) when it is not yet; not counted.
    func upcomingNow(skipping sentAhead: Int) async -> OutgoingMessage? {
        let position = max(0, sentAhead)
        guard !Task.isCancelled, let serving else { return nil }
        while prepared.count <= position {
            let held = [serving.file] + prepared.map(\.file)
            guard let file = try? await serving.outbox.next(after: held) else { return nil }
            prepared.append(Served(file, of: serving.outbox, to: serving.message.addressee))
        }
        return prepared[position].message
    }

    /// What is ready for `peer` now: its own folder's first file, else the top's.
    func message(for peer: AuthenticatedPeer) async -> OutgoingMessage? {
        guard let ready = try? await readyNow(for: peer) else { return nil }
        prepared = []
        return adopt(ready)
    }

    func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async {
        guard let serving, serving.message == message else { return }
        self.serving = nil
        deliveredCount += 1
        do {
            let destination = try await serving.outbox.markDelivered(serving.file)
            report(.moved(serving.file, movedTo: destination))
        } catch {
            await serving.outbox.release(serving.file)
            report(.moveFailed(serving.file, error))
        }
    }

    // MARK: Choosing

    /// Makes `ready` the message being offered (the one prepared already when it is the same file).
    private func adopt(_ ready: Served) -> OutgoingMessage {
        if let serving, serving.file == ready.file, serving.outbox === ready.outbox { return serving.message }
        serving = ready
        report(.serving(ready.file))
        return ready.message
    }

    /// The first ready file: with `peer`, of its folders then the top's; else the top's, then each peer folder's by
    /// name. Errors of the top outbox are thrown, a folder's skipped.
    private func readyNow(for peer: AuthenticatedPeer?) async throws(OutboxError) -> Served? {
        refreshFolders()
        let folders = peerOutboxes.sorted { $0.key < $1.key }
        let mine = folders.filter { name, _ in peer.map { $0.isListed && $0.isNamed(name) } ?? false }
        for (name, box) in mine {
            if let file = try? await box.next() { return Served(file, of: box, to: name) }
        }
        if let file = try await outbox.next() { return Served(file, of: outbox, to: nil) }
        guard peer == nil else { return nil }
        for (name, box) in folders {
            if let file = try? await box.next() { return Served(file, of: box, to: name) }
        }
        return nil
    }

    /// Waits until any outbox has a ready file (nil after `folderRescan`, an error or
    /// cancellation: the caller looks again). A second file found meanwhile is released.
    private func waitForAnyFile() async -> Served? {
        let boxes: [(String?, Outbox)] = [(nil, outbox)] + peerOutboxes.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let retryDelay = self.retryDelay
        let report = self.report
        return await withTaskGroup(of: Served?.self) { group in
            for (index, (name, box)) in boxes.enumerated() {
                group.addTask {
                    do {
                        return Served(try await box.waitForFile(), of: box, to: name)
                    } catch let error as OutboxError {
                        if index == 0 { report(.unreadable(error, retryIn: retryDelay)) }
                        try? await Task.sleep(for: retryDelay)
                        return nil
                    } catch { return nil }
                }
            }
            group.addTask {
                try? await Task.sleep(for: Self.folderRescan)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            while let extra = await group.next() {
                if let extra { await extra.outbox.release(extra.file) }
            }
            return first
        }
    }

    /// Opens an outbox for each new peer folder and forgets folders that went away. Lists the peer folders again when
    /// they may have changed: the watcher saw an arrival (a folder made or moved in is one), there is no watcher, or
    /// the listing is `folderRescan` old (removals are not signalled). A session draining many files asks for the next
    /// per ACK; listing the whole outbox each time made every message cost as much as the files still waiting.
    private func refreshFolders() {
        // A folder whose name no longer leads to it serves nothing meanwhile (its scans check before each listing).
        // Another directory under the name replaces it, whatever the listing's age; a symbolic link does not (it is
        // never opened): the folder stays, refusing, until its name leads to it again (swapped back) or is gone.
        var moved = false
        for (name, box) in peerOutboxes where !box.isStillInPlace {
            if let status = outbox.folder.status(of: name), status.st_mode & S_IFMT == S_IFDIR {
                peerOutboxes[name] = nil
                moved = true
            }
        }
        let generation = outbox.changeGeneration
        if !moved, outbox.watchesChanges, let last = foldersListed, last.generation == generation,
           ContinuousClock.now - last.at < listingReuseLimit {
            return
        }
        foldersListed = (generation, .now)
        folderListings += 1
        guard let entries = try? DirectoryEntry.list(descriptor: outbox.folder.descriptor) else { return }
        var present = Set<String>()
        for entry in entries {
            let name = entry.name
            guard !name.hasPrefix("."), name != "sent", name != "failed" else { continue }
            // A folder swapped for a link keeps its place (see above).
            if peerOutboxes[name] != nil, let status = outbox.folder.status(of: name), status.st_mode & S_IFMT == S_IFLNK {
                present.insert(name)
                continue
            }
            // The entry's own type where the file system gives it: no lstat per waiting file.
            guard entry.mayBeDirectory else { continue }
            guard let status = outbox.folder.status(of: name), status.st_mode & S_IFMT == S_IFDIR else { continue }
            present.insert(name)
            guard peerOutboxes[name] == nil else { continue }
            let report = self.report
            do {
                // Opened relative to the outbox held, without following a symbolic link.
                peerOutboxes[name] = try Outbox(folder: name, in: outbox, report: { report(.notice($0)) })
            } catch .notADirectory {
                continue   // Swapped for something else since it was examined.
            } catch { report(.unreadable(error, retryIn: Self.folderRescan)) }
        }
        for name in peerOutboxes.keys where !present.contains(name) { peerOutboxes[name] = nil }
    }
}
