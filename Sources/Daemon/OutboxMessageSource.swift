import DaemonSupport
import Roles
import SystemPackage
import Transfer

/// What the outbox-backed source did, for the daemon's log and status line.
enum OutboxSourceEvent: Sendable {
    /// `file` is now the message being offered to centrals.
    case serving(OutboxFile)
    /// `file` was delivered and moved to `movedTo` (nil: it had already left the outbox, e.g.
    /// removed by hand while it was being sent).
    case moved(OutboxFile, movedTo: FilePath?)
    /// Delivered, but the move into `sent/` failed: it stays in the outbox and is sent again.
    case moveFailed(OutboxFile, OutboxError)
    /// The outbox could not be read; the source tries again after `retryIn`.
    case unreadable(OutboxError, retryIn: Duration)
    /// The outbox moved a file it can never send into `failed/`, or skipped it.
    case notice(OutboxNotice)
}

/// The sender daemon's `MessageSource`: the first file of the outbox is the current message;
/// once the peripheral counts it as delivered (framed ACK, or compat unsubscribe after `EOM`)
/// it moves into `sent/` and the next file is served. An empty outbox makes `current()` wait
/// (inotify, no polling loop) until a file is ready.
///
/// Delivery is the only thing that moves a file: a transfer cut short (central gone, adapter
/// off, bluetoothd restarted, SIGTERM) leaves the file where it is, and the next `current()` —
/// in this run or the next start of the daemon — returns it again. The outbox itself holds
/// no state but its files, so a restart serves exactly the files not yet in `sent/`.
///
/// `current()` never ends the run by itself: nil is returned only when the calling task is
/// cancelled (the peripheral tearing down a poweredOn period, or the daemon stopping), where
/// the caller discards the answer.
actor OutboxMessageSource: MessageSource {
    let outbox: Outbox
    private let report: @Sendable (OutboxSourceEvent) -> Void
    private let retryDelay: Duration
    /// The file being offered and its prepared message (hashed once, not per subscription).
    private var serving: (file: OutboxFile, message: OutgoingMessage)?
    /// Pipeline: the file after `serving`, claimed and prepared while `serving` awaits its
    /// ACK; `nextAvailableNow` hands it out once `serving` is delivered.
    private var upcoming: (file: OutboxFile, message: OutgoingMessage)?
    private(set) var deliveredCount = 0

    /// - Parameter retryDelay: the pause before reading an outbox again that could not be
    ///   listed (removed, permissions changed).
    init(outbox: Outbox, retryDelay: Duration = .seconds(5),
         report: @escaping @Sendable (OutboxSourceEvent) -> Void = { _ in }) {
        self.outbox = outbox
        self.retryDelay = retryDelay
        self.report = report
    }

    /// Opens (creating when missing) the outbox at `directory`; files over `maximumFileSize`
    /// or empty go to `failed/`.
    init(directory: FilePath, maximumFileSize: Int, settleTime: Duration = Outbox.defaultSettleTime,
         retryDelay: Duration = .seconds(5),
         report: @escaping @Sendable (OutboxSourceEvent) -> Void = { _ in }) throws(OutboxError) {
        let outbox = try Outbox(directory: directory, maxFileSize: maximumFileSize, settleTime: settleTime,
                                report: { report(.notice($0)) })
        self.init(outbox: outbox, retryDelay: retryDelay, report: report)
    }

    /// The name of the file being offered now, if any.
    var currentFileName: String? { serving?.file.name }

    func current() async -> OutgoingMessage? {
        while !Task.isCancelled {
            let file: OutboxFile
            do {
                file = try await outbox.waitForFile()
            } catch is CancellationError {
                return nil
            } catch let error as OutboxError {
                report(.unreadable(error, retryIn: retryDelay))
                do { try await Task.sleep(for: retryDelay) } catch { return nil }
                continue
            } catch {
                return nil   // waitForFile throws nothing else
            }
            // A file prepared ahead for a session that ended is prepared again when its turn comes.
            upcoming = nil
            if let serving, serving.file == file {
                return serving.message
            }
            let message = Self.message(for: file)
            serving = (file, message)
            report(.serving(file))
            return message
        }
        return nil
    }

    /// The first ready outbox file, without waiting for one (a multi session's next message).
    func nextAvailableNow() async -> OutgoingMessage? {
        guard !Task.isCancelled else { return nil }
        let file: OutboxFile?
        do {
            file = try await outbox.next()
        } catch {
            report(.unreadable(error, retryIn: retryDelay))
            return nil
        }
        guard let file else { return nil }
        if let serving, serving.file == file { return serving.message }
        if let upcoming, upcoming.file == file {
            // Prepared while the last one awaited its ACK: the same message, not hashed again.
            serving = upcoming
            self.upcoming = nil
            report(.serving(file))
            return upcoming.message
        }
        upcoming = nil
        let message = Self.message(for: file)
        serving = (file, message)
        report(.serving(file))
        return message
    }

    /// The file after the one being served, ready now (pipeline); claimed, not counted.
    func upcomingNow() async -> OutgoingMessage? {
        guard !Task.isCancelled, let serving else { return nil }
        if let upcoming { return upcoming.message }
        let file: OutboxFile?
        do {
            file = try await outbox.next(after: serving.file)
        } catch {
            return nil
        }
        guard let file else { return nil }
        let message = Self.message(for: file)
        upcoming = (file, message)
        return message
    }

    private static func message(for file: OutboxFile) -> OutgoingMessage {
        // The outbox file's name travels with it (secure mode, when the receiver takes it).
        OutgoingMessage(payload: file.bytes, file: SentFileAttributes(
            name: file.name, modificationSeconds: file.modificationSeconds,
            modificationNanoseconds: file.modificationNanoseconds))
    }

    func markDelivered(_ message: OutgoingMessage, summary: MessageSummary, to peer: PeerDescription?) async {
        guard let serving, serving.message == message else { return }
        self.serving = nil
        deliveredCount += 1
        do {
            let destination = try await outbox.markDelivered(serving.file)
            report(.moved(serving.file, movedTo: destination))
        } catch {
            await outbox.release(serving.file)
            report(.moveFailed(serving.file, error))
        }
    }
}
