import CBlueZ   // its <sys/socket.h> owns SOCK_NONBLOCK / SOCK_CLOEXEC in this target
import Reactor
import SystemCalls
import SystemPackage
import Synchronization

import Glibc  // like L2CAPChannel.swift: this module is for Linux with glibc

public enum NotificationSocketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `close()` was called on this socket (before or during the operation).
    case closed
    /// The other end went away (BlueZ dropped the subscription, the link was lost).
    case closedByPeer
    case valueTooLong(length: Int, maximum: Int)
    /// On a SOCK_SEQPACKET socket a zero-length packet reads like end-of-stream on the other side.
    case emptyValue
    /// A packet larger than the receive buffer arrived; its tail would have been lost.
    case packetTruncated(length: Int, bufferSize: Int)
    case systemCall(String, Errno)

    public var description: String {
        switch self {
        case .closed: return "the notification socket was closed"
        case .closedByPeer: return "the other end of the notification socket went away"
        case let .valueTooLong(length, maximum):
            return "a \(length)-byte value does not fit the link (at most \(maximum) bytes per notification)"
        case .emptyValue: return "an empty value cannot be sent through a notification socket"
        case let .packetTruncated(length, bufferSize):
            return "a \(length)-byte packet did not fit the \(bufferSize)-byte receive buffer"
        case let .systemCall(call, errno): return "\(call) failed: \(errno)"
        }
    }
}

/// One end of a `SOCK_SEQPACKET` socket carrying GATT values, one packet per value: what BlueZ hands out for
/// `AcquireNotify` / `AcquireWrite` (either side), or what we hand BlueZ for `AcquireNotify` on our characteristic.
///
/// Non-blocking: `send` waits for room on `EAGAIN` (the back-pressure a GATT server gets when the link cannot keep up,
/// CoreBluetooth's `updateValue` returning false); `receive` waits for the next packet. Waiting is a one-shot readiness
/// wait on the reactor: no thread, no polling, and as each wait is removed when it fires, a socket that stays writable
/// cannot make the level-triggered epoll spin (it is in the epoll set only while blocked).
public final class NotificationSocket: @unchecked Sendable, CustomStringConvertible {
    // @unchecked Sendable: the only mutable state is `state`, guarded by its lock; the descriptor number is read under
    // that lock and kept open (use count) while a system call or reactor wait uses it, so a concurrent `close()`
    // never closes it under them.

    public struct PacketLimits: Sendable, Equatable {
        /// The longest packet `send` takes: ATT MTU − 3 for a GATT value, the send MTU for an L2CAP channel.
        public var send: Int
        /// The receive buffer: no packet that arrives may be longer.
        public var receive: Int

        public init(send: Int, receive: Int) {
            self.send = max(send, 1)
            self.receive = max(receive, 1)
        }

        /// Received values are at most MTU − 3 bytes; leave room for a full MTU in case a peer counts differently,
        /// and never go below the 23-byte LE minimum.
        init(mtu: Int) {
            self.init(send: max(mtu - 3, 1), receive: max(mtu, 23))
        }
    }

    /// What the kernel's queue-depth ioctl answers for this kind of socket.
    public enum SendQueueReport: Sendable {
        /// AF_UNIX (SIOCOUTQ): the bytes sent that the peer has not read yet.
        case unsentBytes
        /// AF_BLUETOOTH (TIOCOUTQ): the free room left in the send buffer.
        case freeSpace
    }

    /// The ATT MTU BlueZ reported with the socket; for an L2CAP channel, its send MTU + 3.
    public var mtu: Int { maximumValueLength + 3 }
    /// The longest value one packet may carry: ATT MTU − 3 (the notification header), or an L2CAP send MTU.
    public var maximumValueLength: Int { state.withLock { $0.limits.send } }
    private let queueReport: SendQueueReport

    private struct State {
        var fd: Int32
        var limits: PacketLimits
        var closeRequested = false
        var fdClosed = false
        /// System calls in flight plus reactor waits not yet ended.
        var users = 0
        var waiters: [ObjectIdentifier: ReadinessWait] = [:]

        /// The descriptor, once, when a close was asked for and nothing uses it any more.
        mutating func descriptorToClose() -> Int32? {
            guard closeRequested, users == 0, !fdClosed else { return nil }
            fdClosed = true
            return fd
        }
    }

    private let state: Mutex<State>
    private var receiveBufferSize: Int { state.withLock { $0.limits.receive } }

    /// Takes ownership of `fd` (closed by `close()` or on release) and makes it non-blocking.
    public convenience init(adopting fd: Int32, mtu: Int) throws(NotificationSocketError) {
        try self.init(adopting: fd, limits: PacketLimits(mtu: mtu), queueReport: .unsentBytes)
    }

    /// Takes ownership of `fd` with explicit packet limits (an L2CAP channel's MTUs).
    public init(adopting fd: Int32, limits: PacketLimits, queueReport: SendQueueReport) throws(NotificationSocketError) {
        let flags = fcntl(fd, F_GETFL)
        if flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 {
            let error = Errno(rawValue: errno)
            _ = Glibc.close(fd)
            throw .systemCall("fcntl(O_NONBLOCK)", error)
        }
        self.queueReport = queueReport
        self.state = Mutex(State(fd: fd, limits: limits))
    }

    /// Changes the packet limits (an L2CAP channel learns its MTUs once connected).
    func setLimits(_ limits: PacketLimits) { state.withLock { $0.limits = limits } }

    /// A connected pair, both ends owned by Swift values (tests, loopback).
    public static func makePair(mtu: Int) throws(NotificationSocketError) -> (NotificationSocket, NotificationSocket) {
        try makePair(limits: PacketLimits(mtu: mtu))
    }

    public static func makePair(limits: PacketLimits) throws(NotificationSocketError) -> (NotificationSocket, NotificationSocket) {
        let (a, second) = try makeExportPair(limits: limits)
        // On failure `second` is closed by the initialiser and `a` closes the first end.
        return (a, try NotificationSocket(adopting: second, limits: limits, queueReport: .unsentBytes))
    }

    /// A pair for an `AcquireNotify` reply: `local` stays with us, `exported` goes to BlueZ (the caller wraps it in a
    /// `UnixFileDescriptor`, which closes it once the reply is sent).
    public static func makeExportPair(mtu: Int) throws(NotificationSocketError) -> (local: NotificationSocket, exported: Int32) {
        try makeExportPair(limits: PacketLimits(mtu: mtu))
    }

    private static func makeExportPair(
        limits: PacketLimits
    ) throws(NotificationSocketError) -> (local: NotificationSocket, exported: Int32) {
        let (first, second) = try makeRawPair()
        do {
            return (try NotificationSocket(adopting: first, limits: limits, queueReport: .unsentBytes), second)
        } catch {
            _ = Glibc.close(second)
            throw error
        }
    }

    static func makeRawPair() throws(NotificationSocketError) -> (Int32, Int32) {
        var fds: [Int32] = [-1, -1]
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, type, 0, &fds) == 0 else {
            throw .systemCall("socketpair", Errno(rawValue: errno))
        }
        return (fds[0], fds[1])
    }

    deinit {
        close()
    }

    public var description: String {
        let fd = state.withLock { $0.fdClosed || $0.closeRequested ? -1 : $0.fd }
        return "NotificationSocket(fd: \(fd), mtu: \(mtu))"
    }

    public var isClosed: Bool { state.withLock { $0.closeRequested } }

    // MARK: Sending

    /// Sends one value as one packet, waiting (without blocking a thread) while the socket is full. Throws
    /// `.closedByPeer` once the other end is gone, `CancellationError` when cancelled while waiting.
    public func send(_ value: [UInt8]) async throws {
        try checkSendable(value)
        while true {
            try Task.checkCancellation()
            if try trySend(value) { return }
            try await waitUntil(.writable)
        }
    }

    /// Sends one value if the socket has room now; false, sending nothing, when full (`updateValue` → NO);
    /// `waitUntilWritable()` then returns once there is room.
    public func trySend(_ value: [UInt8]) throws -> Bool {
        try checkSendable(value)
        return try withDescriptor { fd -> Bool in
            let outcome = retryingInterrupts {
                // MSG_NOSIGNAL: a vanished peer gives EPIPE instead of SIGPIPE.
                value.withUnsafeBytes { buffer in Glibc.send(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL)) }
            }
            switch outcome {
            case .completed: return true
            case .wouldBlock, .failed(.noBufferSpace): return false
            case .failed(.brokenPipe), .failed(.connectionReset), .failed(.socketNotConnected):
                throw NotificationSocketError.closedByPeer
            case .failed(let error): throw NotificationSocketError.systemCall("send", error)
            }
        }
    }

    /// Returns once the socket can take another packet (or the peer is gone: the next send reports `.closedByPeer`).
    public func waitUntilWritable() async throws { try await waitUntil(.writable) }

    private func checkSendable(_ value: [UInt8]) throws {
        guard !value.isEmpty else { throw NotificationSocketError.emptyValue }
        guard value.count <= maximumValueLength else {
            throw NotificationSocketError.valueTooLong(length: value.count, maximum: maximumValueLength)
        }
    }

    // MARK: Receiving

    /// The next packet (one notification or written value), or nil once the other end closed; waits without blocking
    /// a thread. A zero-length packet cannot be told from end-of-stream on SOCK_SEQPACKET and is reported as such.
    public func receive() async throws -> [UInt8]? {
        var buffer = [UInt8](repeating: 0, count: receiveBufferSize)
        // The kernel reports a connection's error (ECONNRESET when the peer hung up) before the packets still queued,
        // and clears it as it does: one more read takes what the peer sent last (an L2CAP peer's final SDU followed at
        // once by its disconnection).
        var errorReported = false
        while true {
            try Task.checkCancellation()
            let bufferSize = receiveBufferSize
            let received: Int? = try withDescriptor { fd -> Int? in
                // MSG_TRUNC makes recv return the real length: a packet larger than the buffer is detected, not cut.
                let outcome = retryingInterrupts {
                    buffer.withUnsafeMutableBytes { raw in recv(fd, raw.baseAddress, raw.count, Int32(MSG_TRUNC)) }
                }
                switch outcome {
                case .completed(let length) where length > bufferSize:
                    throw NotificationSocketError.packetTruncated(length: length, bufferSize: bufferSize)
                case .completed(let length): return length
                case .wouldBlock: return errorReported ? 0 : nil
                case .failed(.connectionReset), .failed(.socketNotConnected), .failed(.brokenPipe):
                    if errorReported { return 0 }
                    errorReported = true
                    return -1
                case .failed(let error): throw NotificationSocketError.systemCall("recv", error)
                }
            }
            switch received {
            case .some(0): return nil
            case .some(-1): continue   // read once more for what is queued behind the error
            case .some(let count): return Array(buffer[0..<count])
            case .none: try await waitUntil(.readable)
            }
        }
    }

    /// Returns once the other end closed (BlueZ released the subscription, the link dropped) or this socket was closed.
    /// What the peer sends meanwhile is discarded: only for a socket nobody `receive`s from — the notifying side's end,
    /// where BlueZ sends nothing for plain notifications.
    public func waitForHangUp() async {
        while true {
            do {
                // A packet (e.g. an indication confirmation) is discarded, a long one too: it was read whole.
                guard try await receive() != nil else { return }
            } catch NotificationSocketError.packetTruncated {
                continue
            } catch {
                return
            }
        }
    }

    // MARK: Queue depth

    /// Bytes sent that the other end (bluetoothd) has not read yet (SIOCOUTQ); 0 once it took everything, and once it
    /// closed (its queue is dropped).
    public var unsentByteCount: Int {
        get throws {
            switch queueReport {
            case .unsentBytes:
                return try queueIoctl("ioctl(SIOCOUTQ)", bletransfer_socket_unsent_bytes)
            case .freeSpace:
                // The kernel frees what it handed to the controller: held = buffer − free room.
                let buffer = try sendBufferSize
                return max(0, buffer - (try queueIoctl("ioctl(TIOCOUTQ)", bletransfer_bt_socket_free_send_space)))
            }
        }
    }

    /// A queue-depth ioctl's answer (its shim returns −errno on failure).
    private func queueIoctl(_ name: String, _ call: (Int32) -> Int32) throws -> Int {
        try withDescriptor { fd -> Int in
            let result = call(fd)
            if result < 0 { throw NotificationSocketError.systemCall(name, Errno(rawValue: -result)) }
            return Int(result)
        }
    }

    /// Returns once the peer has read everything sent so far (SIOCOUTQ is 0), also when it then closed its end (BlueZ
    /// does when the central unsubscribes after the last value). Throws `.closedByPeer` when the peer went away without
    /// reading everything: the kernel drops the unread packets and flags our end with ECONNRESET.
    ///
    /// No readiness event says "the send queue is empty" (POLLOUT fires as soon as there is room), so this polls the
    /// depth every `pollInterval`: for the end of a message, not every packet.
    public func waitUntilDrained(pollInterval: Duration = .milliseconds(5)) async throws {
        while true {
            let queued = try unsentByteCount
            let hungUp = try withDescriptor { fd -> Bool in
                let result = bletransfer_socket_hung_up(fd)
                if result < 0 { throw NotificationSocketError.systemCall("poll", Errno(rawValue: -result)) }
                return result == 1
            }
            if hungUp {
                let pendingError = try withDescriptor { fd in bletransfer_socket_take_error(fd) }
                if queued > 0 || pendingError == ECONNRESET { throw NotificationSocketError.closedByPeer }
                return
            }
            if queued == 0 { return }
            try await Task.sleep(for: pollInterval)
        }
    }

    /// Sets SO_SNDBUF (the kernel doubles it, with a minimum of a few KiB). A small buffer keeps EAGAIN back-pressure
    /// close to what the link carries.
    public func setSendBufferSize(_ bytes: Int) throws {
        try withDescriptor { fd in
            var value = Int32(clamping: bytes)
            let size = socklen_t(MemoryLayout<Int32>.size)
            if setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, size) != 0 {
                throw NotificationSocketError.systemCall("setsockopt(SO_SNDBUF)", Errno(rawValue: errno))
            }
        }
    }

    /// The current SO_SNDBUF as the kernel reports it (already doubled).
    public var sendBufferSize: Int {
        get throws {
            try withDescriptor { fd -> Int in
                var value: Int32 = 0
                var size = socklen_t(MemoryLayout<Int32>.size)
                if getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, &size) != 0 {
                    throw NotificationSocketError.systemCall("getsockopt(SO_SNDBUF)", Errno(rawValue: errno))
                }
                return Int(value)
            }
        }
    }

    // MARK: Closing

    /// Closes the socket. Idempotent. Pending `send`/`receive` calls fail with `.closed`.
    public func close() {
        let (waiters, closeNow): ([ReadinessWait], Int32?) = state.withLock { state in
            guard !state.closeRequested else { return ([], nil) }
            state.closeRequested = true
            defer { state.waiters.removeAll() }
            return (Array(state.waiters.values), state.descriptorToClose())
        }
        for waiter in waiters {
            waiter.cancel(throwing: NotificationSocketError.closed)
        }
        if let closeNow { _ = Glibc.close(closeNow) }
    }

    // MARK: Descriptor use counting

    private func acquireDescriptor() throws -> Int32 {
        try state.withLock { state in
            guard !state.closeRequested else { throw NotificationSocketError.closed }
            state.users += 1
            return state.fd
        }
    }

    private func releaseDescriptor() {
        let closeNow = state.withLock { state in
            state.users -= 1
            return state.descriptorToClose()
        }
        if let closeNow { _ = Glibc.close(closeNow) }
    }

    func withDescriptor<Result>(_ body: (Int32) throws -> Result) throws -> Result {
        let fd = try acquireDescriptor()
        defer { releaseDescriptor() }
        return try body(fd)
    }

    // MARK: Waiting for readiness

    /// Waits parked on this socket right now (for tests that must know a wait began).
    var parkedWaitCount: Int { state.withLock { $0.waiters.count } }

    func waitUntil(_ events: ReadinessEvents) async throws {
        let reactor: Reactor
        do {
            reactor = try Reactor.shared()
        } catch {
            throw NotificationSocketError.systemCall(error.call, error.errno)
        }
        // Held until the wait ended, after its interest left the epoll set: a `close()` meanwhile ends the wait, and
        // the last release closes the descriptor.
        let fd = try acquireDescriptor()
        defer { releaseDescriptor() }
        let wait = ReadinessWait(reactor: reactor, fd: fd, events: events)
        let key = ObjectIdentifier(wait)
        let registered = state.withLock { state -> Bool in
            guard !state.closeRequested else { return false }
            state.waiters[key] = wait
            return true
        }
        defer { _ = state.withLock { $0.waiters.removeValue(forKey: key) } }
        if !registered { wait.cancel(throwing: NotificationSocketError.closed) }
        do {
            _ = try await wait.value
        } catch let error as SystemCallError {
            throw NotificationSocketError.systemCall(error.call, error.errno)
        }
    }
}
