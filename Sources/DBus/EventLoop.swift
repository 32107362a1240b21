import CDBus
import Reactor
import Synchronization
import SystemCalls

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The driver of one libdbus connection on the process's reactor, which does all of its I/O. libdbus's watches are
/// reactor interests, its timeouts reactor timers, and every turn this loop's hook dispatches what was read
/// (`dbus_connection_dispatch` until complete). So every libdbus call on the connection, and its callbacks, happen on
/// the reactor thread; other threads enqueue jobs. Nothing here blocks (not even Hello or a flush): inbound calls are
/// served while our own calls await replies, and a connection waiting for its bus holds up no other.
///
/// `@unchecked Sendable`: the fields marked "loop thread only" are touched only on the reactor thread (jobs, the hook,
/// and libdbus's callbacks, which run on the thread that dispatches or handles a watch); the job queue is a Mutex.
final class EventLoop: @unchecked Sendable {
    typealias Job = @Sendable (EventLoop) -> Void

    private struct Queue {
        var jobs: [Job] = []
        var drainScheduled = false
        var accepting = true
    }

    private let queue = Mutex(Queue())
    let reactor: Reactor

    // Loop thread only.
    private(set) var connection: OpaquePointer?
    private var watches: [(watch: OpaquePointer, interest: Reactor.Registration, events: ReadinessEvents)] = []
    private var timeouts: [(timeout: OpaquePointer, timer: Reactor.Registration?)] = []
    private var hook: Reactor.Registration?
    private var activeCalls: [ObjectIdentifier: PendingCall] = [:]
    private var pendingCallsToRelease: [OpaquePointer] = []
    /// Callers of `sendAndFlush` whose message is still in libdbus's outgoing queue.
    private var flushWaiters: [@Sendable (Bool) -> Void] = []
    private var stopRequested = false
    /// Called for every message libdbus does not route to a pending call (method calls to us, signals); true when
    /// handled (a reply is or will be sent).
    var messageHandler: ((Message) -> Bool)?
    /// Called once, on the loop thread, when the connection is gone (lost or closed).
    var disconnectHandler: (() -> Void)?

    init() throws {
        _ = EventLoop.threadsInitialized
        reactor = try Reactor.shared()
    }

    /// libdbus must be told once, before any other call, that it is used from several threads.
    private static let threadsInitialized: Bool = dbus_threads_init_default() != 0

    // MARK: Starting and stopping

    /// Opens a private connection to `address` on the reactor thread and registers it with the bus (Hello, sent and
    /// answered like any other call, so the reactor serves everything else meanwhile). Returns the unique name.
    func start(address: String) async throws -> String {
        let hello = try Message.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            method: "Hello")
        let call = PendingCall(loop: self)
        let reply: Message
        do {
            reply = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Message, any Error>) in
                call.install(continuation)
                let queued = enqueue { loop in
                    do {
                        try loop.open(address: address)
                    } catch {
                        loop.queue.withLock { $0.accepting = false }
                        call.finish(.failure(error))
                        return
                    }
                    loop.startCall(hello, timeoutMilliseconds: -1, call: call)
                }
                if !queued { call.finish(.failure(DBusError.disconnected())) }
            }
        } catch let error as DBusError where error.isDisconnected {
            // Authentication refused or the bus hung up before answering Hello.
            throw DBusError.disconnected("the bus at \(address) closed the connection before accepting it")
        }
        guard reply.type != MessageType.error, let uniqueName = try? reply.arguments().first?.string else {
            requestStop()
            if reply.type == MessageType.error { throw reply.asError() }
            throw DBusError(name: DBusError.failedName, message: "the bus did not accept the connection")
        }
        // Before any job a caller can queue once this returns.
        enqueue { loop in
            if let connection = loop.connection { _ = dbus_bus_set_unique_name(connection, uniqueName) }
        }
        return uniqueName
    }

    private func open(address: String) throws {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        // For a unix socket (the system bus) this connects at once; authentication and Hello run as the reactor
        // handles the socket.
        guard let connection = dbus_connection_open_private(address, &error) else {
            throw DBusError(taking: &error, fallback: "could not connect to \(address)")
        }
        dbus_connection_set_exit_on_disconnect(connection, 0)
        self.connection = connection
        // The hook, watches and timers hold the loop strongly until `shutDown` removes them: they keep it alive while
        // the connection is open, whoever else lets go of it.
        hook = reactor.addHook { [self] in turn() }
        installCallbacks(on: connection)
    }

    /// Asks the loop to close the connection and leave the reactor. Idempotent; returns at once.
    func requestStop() {
        enqueue { loop in  // not accepted when already stopping or stopped
            loop.stopRequested = true
            loop.reactor.wakeUp()
        }
    }

    // MARK: Jobs

    /// Runs `job` on the loop thread; false when the loop no longer accepts jobs (closed or lost): it will never run.
    @discardableResult
    func enqueue(_ job: @escaping Job) -> Bool {
        let mustSchedule = queue.withLock { queue -> Bool? in
            guard queue.accepting else { return nil }
            queue.jobs.append(job)
            defer { queue.drainScheduled = true }
            return !queue.drainScheduled
        }
        guard let mustSchedule else { return false }
        // One reactor job runs everything queued here by then, in order; the loop (not the reactor) owns the queue so
        // that a stop can still run what was accepted before it.
        if mustSchedule { reactor.enqueue { [self] in runQueuedJobs() } }
        return true
    }

    /// Sends a message without expecting a reply; false when the connection is gone.
    @discardableResult
    func send(_ message: Message) -> Bool {
        enqueue { loop in
            guard let connection = loop.connection else { return }
            _ = dbus_connection_send(connection, message.pointer, nil)
        }
    }

    /// Sends `message` and calls `done` on the loop thread once everything queued so far is written to the bus socket
    /// (true), or false when the connection is gone first. The write happens as the reactor finds the socket writable.
    func sendAndFlush(_ message: Message, done: @escaping @Sendable (Bool) -> Void) {
        let queued = enqueue { loop in
            guard let connection = loop.connection else {
                done(false)
                return
            }
            _ = dbus_connection_send(connection, message.pointer, nil)
            loop.flushWaiters.append(done)
            loop.reactor.wakeUp()  // the hook reports it written, or sees the write watch enabled
        }
        if !queued { done(false) }
    }

    private func runQueuedJobs() {
        let jobs = queue.withLock { queue -> [Job] in
            queue.drainScheduled = false
            defer { queue.jobs.removeAll(keepingCapacity: true) }
            return queue.jobs
        }
        for job in jobs { job(self) }
    }

    // MARK: Each turn of the reactor

    /// Run by the reactor after its jobs and before it waits.
    private func turn() {
        guard let connection else { return }
        while dbus_connection_dispatch(connection) == DBUS_DISPATCH_DATA_REMAINS {}
        releaseFinishedPendingCalls()
        if stopRequested || dbus_connection_get_is_connected(connection) == 0 {
            shutDown()
            return
        }
        if !flushWaiters.isEmpty && dbus_connection_has_messages_to_send(connection) == 0 {
            answerFlushes(true)
        }
        // The watches' enabled flags are re-read before every wait, whether or not libdbus said it toggled them.
        for entry in watches { toggleWatch(entry.watch) }
    }

    private func answerFlushes(_ written: Bool) {
        let waiters = flushWaiters
        flushWaiters.removeAll()
        for done in waiters { done(written) }
    }

    private func installCallbacks(on connection: OpaquePointer) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        // The loop outlives the connection (it unrefs the connection before it leaves the reactor, and the reactor's
        // hook holds it until then), so the callbacks get an unretained pointer to it.
        dbus_connection_set_watch_functions(
            connection,
            { watch, data in EventLoop.from(data).addWatch(watch!) },
            { watch, data in EventLoop.from(data).removeWatch(watch!) },
            { watch, data in EventLoop.from(data).toggleWatch(watch!) },
            me, nil)
        dbus_connection_set_timeout_functions(
            connection,
            { timeout, data in EventLoop.from(data).addTimeout(timeout!) },
            { timeout, data in EventLoop.from(data).removeTimeout(timeout!) },
            { timeout, data in EventLoop.from(data).armTimeout(timeout!) },
            me, nil)
        dbus_connection_set_wakeup_main_function(
            connection, { data in EventLoop.from(data).reactor.wakeUp() }, me, nil)
        dbus_connection_add_filter(connection, { _, message, data in EventLoop.from(data).filter(message!) }, me, nil)
    }

    private static func from(_ data: UnsafeMutableRawPointer?) -> EventLoop {
        Unmanaged<EventLoop>.fromOpaque(data!).takeUnretainedValue()
    }

    private func shutDown() {
        queue.withLock { $0.accepting = false }
        // Jobs queued before the stop still run: replies and signals already handed to us are sent, calls already
        // started are failed below.
        runQueuedJobs()
        if let connection {
            for (_, call) in activeCalls {
                cancelCall(call)
                call.finish(.failure(DBusError.disconnected()))
            }
            activeCalls.removeAll()
            releaseFinishedPendingCalls()
            answerFlushes(false)
            disconnectHandler?()
            disconnectHandler = nil
            messageHandler = nil
            dbus_connection_close(connection)
            dbus_connection_unref(connection)
            self.connection = nil
        }
        // libdbus removed its watches and timeouts as it closed and freed the connection; anything left goes here.
        for entry in watches { reactor.removeInterest(entry.interest) }
        watches.removeAll()
        for entry in timeouts { if let timer = entry.timer { reactor.removeTimer(timer) } }
        timeouts.removeAll()
        if let hook { reactor.removeHook(hook) }
        hook = nil
        // Jobs that raced with the stop see `connection == nil` and fail their callers.
        runQueuedJobs()
    }

    // MARK: Watches and timeouts (libdbus callbacks, loop thread)

    /// DBUS_WATCH_READABLE, _WRITABLE, _ERROR and _HANGUP; a watch asks for the first two only.
    private static let watchFlags: [(ReadinessEvents, UInt32)] = [
        (.readable, 1), (.writable, 2), (.error, 4), (.hangUp, 8),
    ]

    private static func events(of watch: OpaquePointer) -> ReadinessEvents {
        guard dbus_watch_get_enabled(watch) != 0 else { return [] }
        let flags = dbus_watch_get_flags(watch)
        return ReadinessEvents(watchFlags.prefix(2).filter { flags & $0.1 != 0 }.map(\.0))
    }

    private func addWatch(_ watch: OpaquePointer) -> dbus_bool_t {
        let events = Self.events(of: watch)
        guard let interest = try? reactor.addInterest(fd: dbus_watch_get_unix_fd(watch), events: events, handler: {
            [self] ready in handle(watch, ready)
        }) else {
            return 0  // libdbus treats the watch as not added
        }
        watches.append((watch, interest, events))
        return 1
    }

    private func handle(_ watch: OpaquePointer, _ ready: ReadinessEvents) {
        _ = dbus_watch_handle(watch, Self.watchFlags.filter { ready.contains($0.0) }.reduce(0) { $0 | $1.1 })
    }

    private func removeWatch(_ watch: OpaquePointer) {
        guard let index = watches.firstIndex(where: { $0.watch == watch }) else { return }
        reactor.removeInterest(watches[index].interest)
        watches.remove(at: index)
    }

    private func toggleWatch(_ watch: OpaquePointer) {
        guard let index = watches.firstIndex(where: { $0.watch == watch }) else { return }
        let events = Self.events(of: watch)
        guard events != watches[index].events else { return }
        watches[index].events = events
        reactor.setEvents(events, of: watches[index].interest)
    }

    private func addTimeout(_ timeout: OpaquePointer) -> dbus_bool_t {
        timeouts.append((timeout, nil))
        armTimeout(timeout)
        return 1
    }

    private func removeTimeout(_ timeout: OpaquePointer) {
        guard let index = timeouts.firstIndex(where: { $0.timeout == timeout }) else { return }
        if let timer = timeouts[index].timer { reactor.removeTimer(timer) }
        timeouts.remove(at: index)
    }

    /// (Re)starts the timeout's timer for its full interval, or stops it when disabled.
    private func armTimeout(_ timeout: OpaquePointer) {
        guard let index = timeouts.firstIndex(where: { $0.timeout == timeout }) else { return }
        if let timer = timeouts[index].timer { reactor.removeTimer(timer) }
        timeouts[index].timer = nil
        guard dbus_timeout_get_enabled(timeout) != 0 else { return }
        let deadline = ContinuousClock.now + .milliseconds(dbus_timeout_get_interval(timeout))
        timeouts[index].timer = reactor.addTimer(at: deadline) { [self] in fire(timeout) }
    }

    private func fire(_ timeout: OpaquePointer) {
        // libdbus timeouts repeat until removed or disabled: re-arm before handling, which may remove it (or others).
        // The timer that fired is gone: removing it again while re-arming does nothing.
        guard timeouts.contains(where: { $0.timeout == timeout }) else { return }
        armTimeout(timeout)
        _ = dbus_timeout_handle(timeout)
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
                // libdbus answers every outstanding call with a synthesized NoReply when the connection drops; the
                // caller should learn that the bus went away.
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
