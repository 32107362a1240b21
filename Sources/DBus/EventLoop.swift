import CDBus
import Synchronization
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The one thread that owns a libdbus connection and does all of its I/O.
///
/// libdbus is driven through its watch and timeout functions: the thread `poll`s the watch fds,
/// the nearest timeout and an eventfd. Other threads never touch the connection: they enqueue
/// jobs (closures run on this thread) and wake it through the eventfd. Nothing here blocks
/// except `poll` itself, so inbound calls are served while our own calls await their replies.
///
/// `@unchecked Sendable`: the fields marked "loop thread only" are read and written only on the
/// loop thread (inside jobs and libdbus callbacks, which libdbus runs on the thread that
/// dispatches, i.e. this one); the job queue, the only state other threads reach, is a Mutex.
final class EventLoop: @unchecked Sendable {
    typealias Job = @Sendable (EventLoop) -> Void

    private struct Queue {
        var jobs: [Job] = []
        var wakeupPending = false
        var accepting = true
    }

    private let queue = Mutex(Queue())
    private let wakeupFD: Int32

    // Loop thread only.
    private(set) var connection: OpaquePointer?
    private var watches: [OpaquePointer] = []
    private var timeouts: [(timeout: OpaquePointer, deadline: ContinuousClock.Instant?)] = []
    private var activeCalls: [ObjectIdentifier: PendingCall] = [:]
    private var pendingCallsToRelease: [OpaquePointer] = []
    private var stopRequested = false
    /// Called for every message libdbus does not route to a pending call (method calls to us,
    /// signals). Returns true when the message was handled (a reply is or will be sent).
    var messageHandler: ((Message) -> Bool)?
    /// Called once, on the loop thread, when the connection is gone (lost or closed).
    var disconnectHandler: (() -> Void)?

    init() throws {
        _ = EventLoop.threadsInitialized
        let fd = cdbus_wakeup_fd_create()
        guard fd >= 0 else { throw SystemCallError(call: "eventfd", errno: .init(rawValue: errno)) }
        wakeupFD = fd
    }

    /// libdbus must be told once, before any other call, that it is used from several threads.
    private static let threadsInitialized: Bool = dbus_threads_init_default() != 0

    // MARK: Starting and stopping

    /// Starts the thread, which opens a private connection to `address` and registers it with
    /// the bus (Hello). Returns the unique name.
    func start(address: String) async throws -> String {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<String, any Error>) in
            let startup = Startup(loop: self, address: address, continuation: continuation)
            var thread = pthread_t()
            let box = Unmanaged.passRetained(startup).toOpaque()
            let result = pthread_create(&thread, nil, { argument in
                let startup = Unmanaged<Startup>.fromOpaque(argument!).takeRetainedValue()
                startup.loop.threadMain(startup)
                return nil
            }, box)
            if result != 0 {
                Unmanaged<Startup>.fromOpaque(box).release()
                continuation.resume(throwing: SystemCallError(call: "pthread_create", errno: .init(rawValue: result)))
            } else {
                pthread_detach(thread)
            }
        }
    }

    private final class Startup: @unchecked Sendable {
        // Handed from the starting thread to the loop thread once; never shared after.
        let loop: EventLoop
        let address: String
        let continuation: CheckedContinuation<String, any Error>
        init(loop: EventLoop, address: String, continuation: CheckedContinuation<String, any Error>) {
            self.loop = loop
            self.address = address
            self.continuation = continuation
        }
    }

    /// Asks the loop to close the connection and exit. Idempotent; returns at once.
    func requestStop() {
        let accepted = enqueue { loop in loop.stopRequested = true }
        _ = accepted  // false: already stopping or stopped
    }

    // MARK: Jobs

    /// Runs `job` on the loop thread. False when the loop no longer accepts jobs (connection
    /// closed or lost): the job will never run.
    @discardableResult
    func enqueue(_ job: @escaping Job) -> Bool {
        let mustWake = queue.withLock { queue -> Bool? in
            guard queue.accepting else { return nil }
            queue.jobs.append(job)
            defer { queue.wakeupPending = true }
            return !queue.wakeupPending
        }
        guard let mustWake else { return false }
        if mustWake { cdbus_wakeup_fd_signal(wakeupFD) }
        return true
    }

    /// Sends a message without expecting a reply. False when the connection is gone.
    @discardableResult
    func send(_ message: Message) -> Bool {
        enqueue { loop in
            guard let connection = loop.connection else { return }
            _ = dbus_connection_send(connection, message.pointer, nil)
        }
    }

    /// Sends `message` and writes everything queued so far to the bus socket, then calls
    /// `done` on the loop thread (at once, with false, when the connection is gone).
    func sendAndFlush(_ message: Message, done: @escaping @Sendable (Bool) -> Void) {
        let queued = enqueue { loop in
            guard let connection = loop.connection else {
                done(false)
                return
            }
            _ = dbus_connection_send(connection, message.pointer, nil)
            // A local socket: this writes at once unless the bus is not reading, which a
            // message of a few hundred bytes does not wait for in practice.
            dbus_connection_flush(connection)
            done(true)
        }
        if !queued { done(false) }
    }

    private func runQueuedJobs() {
        let jobs = queue.withLock { queue -> [Job] in
            queue.wakeupPending = false
            defer { queue.jobs.removeAll(keepingCapacity: true) }
            return queue.jobs
        }
        for job in jobs { job(self) }
    }

    // MARK: The thread

    private func threadMain(_ startup: Startup) {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        guard let connection = dbus_connection_open_private(startup.address, &error) else {
            let failure = DBusError(taking: &error, fallback: "could not connect to \(startup.address)")
            finishThread()
            startup.continuation.resume(throwing: failure)
            return
        }
        dbus_connection_set_exit_on_disconnect(connection, 0)
        // Hello is a blocking round-trip, done here on the loop's own thread before the loop
        // serves anything, so no caller and no inbound call is kept waiting by it.
        guard dbus_bus_register(connection, &error) != 0 else {
            let failure = DBusError(taking: &error, fallback: "the bus did not accept the connection")
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            finishThread()
            startup.continuation.resume(throwing: failure)
            return
        }
        self.connection = connection
        let uniqueName = String(cString: dbus_bus_get_unique_name(connection))
        installCallbacks(on: connection)
        startup.continuation.resume(returning: uniqueName)
        run()
    }

    private func installCallbacks(on connection: OpaquePointer) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        // The loop outlives the connection (it unrefs the connection before it exits), so the
        // callbacks get an unretained pointer to it.
        dbus_connection_set_watch_functions(
            connection,
            { watch, data in EventLoop.from(data).addWatch(watch!) },
            { watch, data in EventLoop.from(data).removeWatch(watch!) },
            { _, _ in /* enabled flags are re-read before every poll */ },
            me, nil)
        dbus_connection_set_timeout_functions(
            connection,
            { timeout, data in EventLoop.from(data).addTimeout(timeout!) },
            { timeout, data in EventLoop.from(data).removeTimeout(timeout!) },
            { timeout, data in EventLoop.from(data).toggleTimeout(timeout!) },
            me, nil)
        dbus_connection_set_wakeup_main_function(
            connection, { data in EventLoop.from(data).wakeUp() }, me, nil)
        dbus_connection_add_filter(
            connection,
            { _, message, data in
                EventLoop.from(data).filter(message!)
            }, me, nil)
    }

    private static func from(_ data: UnsafeMutableRawPointer?) -> EventLoop {
        Unmanaged<EventLoop>.fromOpaque(data!).takeUnretainedValue()
    }

    private func wakeUp() {
        cdbus_wakeup_fd_signal(wakeupFD)
    }

    private func run() {
        var pollFDs: [pollfd] = []
        var polledWatches: [OpaquePointer?] = []
        while true {
            runQueuedJobs()
            dispatchAll()
            if stopRequested || connection.map({ dbus_connection_get_is_connected($0) == 0 }) ?? true {
                break
            }

            pollFDs.removeAll(keepingCapacity: true)
            polledWatches.removeAll(keepingCapacity: true)
            pollFDs.append(pollfd(fd: wakeupFD, events: Int16(POLLIN), revents: 0))
            polledWatches.append(nil)
            for watch in watches where dbus_watch_get_enabled(watch) != 0 {
                let flags = dbus_watch_get_flags(watch)
                var events: Int16 = 0
                if flags & 1 != 0 { events |= Int16(POLLIN) }  // DBUS_WATCH_READABLE
                if flags & 2 != 0 { events |= Int16(POLLOUT) }  // DBUS_WATCH_WRITABLE
                pollFDs.append(pollfd(fd: dbus_watch_get_unix_fd(watch), events: events, revents: 0))
                polledWatches.append(watch)
            }

            let timeout = pollTimeoutMilliseconds()
            let result = retryingInterrupts { Int(poll(&pollFDs, nfds_t(pollFDs.count), timeout)) }
            // A failure cannot happen with valid arguments; leave rather than spin.
            guard case .completed = result else { break }
            if pollFDs[0].revents != 0 { cdbus_wakeup_fd_drain(wakeupFD) }
            for index in 1..<pollFDs.count where pollFDs[index].revents != 0 {
                guard let watch = polledWatches[index],
                    watches.contains(where: { $0 == watch })  // an earlier handle may have removed it
                else { continue }
                let revents = Int32(pollFDs[index].revents)
                var flags: UInt32 = 0
                if revents & Int32(POLLIN) != 0 { flags |= 1 }
                if revents & Int32(POLLOUT) != 0 { flags |= 2 }
                if revents & Int32(POLLERR) != 0 { flags |= 4 }  // DBUS_WATCH_ERROR
                if revents & Int32(POLLHUP) != 0 { flags |= 8 }  // DBUS_WATCH_HANGUP
                _ = dbus_watch_handle(watch, flags)
            }
            fireExpiredTimeouts()
        }
        shutDown()
    }

    private func dispatchAll() {
        guard let connection else { return }
        while dbus_connection_dispatch(connection) == DBUS_DISPATCH_DATA_REMAINS {}
        releaseFinishedPendingCalls()
    }

    private func shutDown() {
        queue.withLock { $0.accepting = false }
        // Jobs queued before the stop still run: replies and signals already handed to us are
        // sent, calls already started are failed below.
        runQueuedJobs()
        if let connection {
            for (_, call) in activeCalls {
                if let pending = call.pendingCall {
                    dbus_pending_call_cancel(pending)
                    dbus_pending_call_unref(pending)
                    call.pendingCall = nil
                }
                call.finish(.failure(DBusError.disconnected()))
            }
            activeCalls.removeAll()
            releaseFinishedPendingCalls()
            disconnectHandler?()
            disconnectHandler = nil
            messageHandler = nil
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            self.connection = nil
        }
        finishThread()
    }

    private func finishThread() {
        queue.withLock { $0.accepting = false }
        // Jobs that raced with the stop see `connection == nil` and fail their callers.
        runQueuedJobs()
        #if canImport(Glibc)
        Glibc.close(wakeupFD)
        #elseif canImport(Musl)
        Musl.close(wakeupFD)
        #endif
    }

    // MARK: Watches and timeouts (libdbus callbacks, loop thread)

    private func addWatch(_ watch: OpaquePointer) -> dbus_bool_t {
        watches.append(watch)
        return 1
    }

    private func removeWatch(_ watch: OpaquePointer) {
        watches.removeAll { $0 == watch }
    }

    private func addTimeout(_ timeout: OpaquePointer) -> dbus_bool_t {
        timeouts.append((timeout, deadline(for: timeout)))
        return 1
    }

    private func removeTimeout(_ timeout: OpaquePointer) {
        timeouts.removeAll { $0.timeout == timeout }
    }

    private func toggleTimeout(_ timeout: OpaquePointer) {
        if let index = timeouts.firstIndex(where: { $0.timeout == timeout }) {
            timeouts[index].deadline = deadline(for: timeout)
        }
    }

    private func deadline(for timeout: OpaquePointer) -> ContinuousClock.Instant? {
        guard dbus_timeout_get_enabled(timeout) != 0 else { return nil }
        return .now + .milliseconds(dbus_timeout_get_interval(timeout))
    }

    private func pollTimeoutMilliseconds() -> Int32 {
        guard let nearest = timeouts.compactMap(\.deadline).min() else { return -1 }
        let remaining = ContinuousClock.now.duration(to: nearest)
        if remaining <= .zero { return 0 }
        return Int32(clamping: remaining.millisecondsRoundedUp)
    }

    private func fireExpiredTimeouts() {
        let now = ContinuousClock.now
        let expired = timeouts.filter { entry in entry.deadline.map { $0 <= now } ?? false }.map(\.timeout)
        for timeout in expired {
            // Handling a timeout may remove it (or others): re-check membership each time.
            guard let index = timeouts.firstIndex(where: { $0.timeout == timeout }) else { continue }
            timeouts[index].deadline = deadline(for: timeout)
            _ = dbus_timeout_handle(timeout)
        }
    }

    // MARK: Messages (loop thread)

    private func filter(_ message: OpaquePointer) -> DBusHandlerResult {
        let type = dbus_message_get_type(message)
        if type == MessageType.signal,
            dbus_message_is_signal(message, "org.freedesktop.DBus.Local", "Disconnected") != 0
        {
            // The loop notices the lost connection after this dispatch and shuts down.
            return DBUS_HANDLER_RESULT_HANDLED
        }
        guard let messageHandler else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        let handled = messageHandler(Message(adopting: dbus_message_ref(message)))
        return handled ? DBUS_HANDLER_RESULT_HANDLED : DBUS_HANDLER_RESULT_NOT_YET_HANDLED
    }

    // MARK: Method calls

    /// Sends `message` and completes `call` with the reply (loop thread).
    func startCall(_ message: Message, timeoutMilliseconds: Int32, call: PendingCall) {
        guard let connection else {
            call.finish(.failure(DBusError.disconnected()))
            return
        }
        guard !call.isFinished else { return }  // cancelled before it was sent
        var pending: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(connection, message.pointer, &pending, timeoutMilliseconds) != 0,
            let pending
        else {
            call.finish(.failure(DBusError.disconnected()))
            return
        }
        call.pendingCall = pending
        activeCalls[ObjectIdentifier(call)] = call
        let userData = Unmanaged.passRetained(call).toOpaque()
        dbus_pending_call_set_notify(
            pending,
            { pending, data in
                let call = Unmanaged<PendingCall>.fromOpaque(data!).takeUnretainedValue()
                call.loop?.complete(call, pending: pending!)
            },
            userData,
            { data in Unmanaged<PendingCall>.fromOpaque(data!).release() })
    }

    private func complete(_ call: PendingCall, pending: OpaquePointer) {
        if let reply = dbus_pending_call_steal_reply(pending) {
            let message = Message(adopting: reply)
            if let connection, dbus_connection_get_is_connected(connection) == 0,
                message.errorName == DBusError.noReplyName
            {
                // libdbus answers every outstanding call with a synthesized NoReply when the
                // connection drops; the caller should learn that the bus went away.
                call.finish(.failure(DBusError.disconnected("the D-Bus connection was lost")))
            } else {
                call.finish(.success(message))
            }
        } else {
            call.finish(.failure(DBusError(name: DBusError.noReplyName, message: "no reply")))
        }
        activeCalls[ObjectIdentifier(call)] = nil
        if call.pendingCall != nil {
            // Released after dispatch returns, not inside libdbus's own notify callback.
            pendingCallsToRelease.append(pending)
            call.pendingCall = nil
        }
    }

    /// Cancels the call's pending reply, if it is still outstanding (loop thread).
    func cancelCall(_ call: PendingCall) {
        guard let pending = call.pendingCall else { return }
        dbus_pending_call_cancel(pending)
        dbus_pending_call_unref(pending)
        call.pendingCall = nil
        activeCalls[ObjectIdentifier(call)] = nil
    }

    private func releaseFinishedPendingCalls() {
        for pending in pendingCallsToRelease { dbus_pending_call_unref(pending) }
        pendingCallsToRelease.removeAll(keepingCapacity: true)
    }
}

extension DBusError {
    /// Converts and frees a libdbus error.
    init(taking error: inout CDBus.DBusError, fallback: String) {
        if dbus_error_is_set(&error) != 0 {
            let name = error.name.map { String(cString: $0) } ?? DBusError.failedName
            let message = error.message.map { String(cString: $0) } ?? fallback
            self.init(name: name, message: message)
        } else {
            self.init(name: DBusError.failedName, message: fallback)
        }
        dbus_error_free(&error)
    }
}
