import TestSupport
@testable import BlueZ
import Reactor
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("NotificationSocket over a local socketpair")
struct NotificationSocketTests {
    /// Sending on `socket` fails: its peer closed its end.
    static func expectSendFailsWithPeerGone(_ socket: NotificationSocket, sourceLocation: SourceLocation = #_sourceLocation) async {
        await #expect(throws: NotificationSocketError.closedByPeer, sourceLocation: sourceLocation) {
            try await socket.send([0x2A])
        }
    }

    @Test("each send arrives as exactly one packet, boundaries kept")
    func packetBoundaries() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 23)
        defer { sender.close(); receiver.close() }
        let values: [[UInt8]] = [[1], [2, 3], Array(repeating: 7, count: 20), [9, 9, 9]]
        for value in values {
            try await sender.send(value)
        }
        for value in values {
            let packet = try await receiver.receive()
            #expect(packet == value)
        }
    }

    /// The kernel reports a reset before the packets still queued (and clears it as it does):
    /// the last packet a peer sent just before hanging up must still be read, then the end.
    /// A local socketpair reports ECONNRESET the same way when the closing end left packets of
    /// its own unread, as an L2CAP channel does when its peer disconnects.
    @Test("the last packet before a reset is read, then end-of-stream")
    func lastPacketBeforeAReset() async throws {
        let (ours, theirs) = try NotificationSocket.makePair(mtu: 23)
        defer { ours.close() }
        try await ours.send([0xAA])           // left unread by the other end: its close is a reset
        try await theirs.send([1, 2, 3])      // its last word
        theirs.close()
        #expect(try await ours.receive() == [1, 2, 3])
        #expect(try await ours.receive() == nil)
    }

    @Test("a value longer than MTU - 3 is refused, an empty value too")
    func lengthChecks() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 23)
        defer { sender.close(); receiver.close() }
        #expect(sender.maximumValueLength == 20)
        await #expect(throws: NotificationSocketError.valueTooLong(length: 21, maximum: 20)) {
            try await sender.send(Array(repeating: 0, count: 21))
        }
        await #expect(throws: NotificationSocketError.emptyValue) {
            try await sender.send([])
        }
    }

    @Test("a full socket makes send wait; draining the other side lets it complete")
    func backPressure() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 515)
        defer { sender.close(); receiver.close() }

        // Fill the socket until the kernel says EAGAIN (trySend returns false).
        var queued = 0
        while try sender.trySend(packet(queued)) {
            queued += 1
        }
        #expect(queued > 0)
        #expect(try sender.trySend(packet(queued)) == false)

        // This send cannot complete until the receiver drains: it parks on POLLOUT.
        let pending = Task { try await sender.send(packet(queued)) }
        // Still full while nobody reads (the parked send did not sneak through).
        #expect(try sender.trySend([0xFF]) == false)

        // Drain everything, including the packet of the parked send, which can only arrive
        // once that send resumed after the kernel reported room.
        for index in 0...queued {
            let received = try await receiver.receive()
            #expect(received == packet(index))
        }
        try await pending.value
    }

    private func packet(_ index: Int) -> [UInt8] {
        var value = Array(repeating: UInt8(truncatingIfNeeded: index), count: 512)
        value[0] = UInt8(truncatingIfNeeded: index >> 8)
        return value
    }

    @Test("queue depth: unsent bytes grow with sends and fall to zero once the peer read them")
    func queueDepth() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 103)
        defer { sender.close(); receiver.close() }
        #expect(try sender.unsentByteCount == 0)
        try await sender.send(Array(repeating: 1, count: 100))
        try await sender.send(Array(repeating: 2, count: 100))
        #expect(try sender.unsentByteCount > 0)
        let draining = Task { try await sender.waitUntilDrained() }
        _ = try await receiver.receive()
        _ = try await receiver.receive()
        try await draining.value
        #expect(try sender.unsentByteCount == 0)
    }

    @Test("draining succeeds when the peer read everything and then closed")
    func drainedThenClosed() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 23)
        defer { sender.close() }
        try await sender.send(Array("EOM".utf8))
        #expect(try await receiver.receive() == Array("EOM".utf8))
        receiver.close()
        try await sender.waitUntilDrained()
    }

    @Test("draining fails when the peer closed with values unread")
    func closedWithUnread() async throws {
        let (sender, receiver) = try NotificationSocket.makePair(mtu: 23)
        defer { sender.close() }
        try await sender.send([1, 2, 3])
        try await sender.send(Array("EOM".utf8))
        receiver.close()
        await #expect(throws: NotificationSocketError.closedByPeer) {
            try await sender.waitUntilDrained()
        }
    }

    @Test("a smaller send buffer makes the socket full sooner")
    func sendBuffer() throws {
        let (large, largePeer) = try NotificationSocket.makePair(mtu: 515)
        let (small, smallPeer) = try NotificationSocket.makePair(mtu: 515)
        defer { large.close(); largePeer.close(); small.close(); smallPeer.close() }
        try small.setSendBufferSize(4096)
        #expect(try small.sendBufferSize < large.sendBufferSize)
        let value = Array(repeating: UInt8(7), count: 512)
        var largeCount = 0
        while try large.trySend(value) { largeCount += 1 }
        var smallCount = 0
        while try small.trySend(value) { smallCount += 1 }
        #expect(smallCount < largeCount)
        #expect(smallCount > 0)
    }

    @Test("end of stream when the peer closes; a pending receive wakes up")
    func hangUp() async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 23)
        defer { b.close() }
        let pending = Task { try await b.receive() }
        try await a.send([1, 2, 3])
        a.close()
        let first = try await pending.value
        #expect(first == [1, 2, 3])
        let end = try await b.receive()
        #expect(end == nil)
        await Self.expectSendFailsWithPeerGone(b)
    }

    @Test("waitForHangUp returns when the peer goes away")
    func waitForHangUp() async throws {
        let (notifier, subscriber) = try NotificationSocket.makePair(mtu: 23)
        defer { notifier.close() }
        let watcher = Task { await notifier.waitForHangUp() }
        try await notifier.send([42])
        subscriber.close()
        await watcher.value
        await Self.expectSendFailsWithPeerGone(notifier)
    }

    @Test("close() fails a pending receive with .closed")
    func closeWakesWaiters() async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 23)
        defer { b.close() }
        let started = Task { try await a.receive() }
        // The receive may or may not have parked yet; either way it must end with .closed.
        a.close()
        await #expect(throws: NotificationSocketError.closed) {
            _ = try await started.value
        }
        #expect(a.isClosed)
    }

    @Test("cancelling a task parked in receive ends it with CancellationError")
    func cancellation() async throws {
        let (a, b) = try NotificationSocket.makePair(mtu: 23)
        defer { a.close(); b.close() }
        let parked = Task { try await a.receive() }
        parked.cancel()
        await #expect(throws: CancellationError.self) {
            _ = try await parked.value
        }
        // The socket still works afterwards.
        try await b.send([5])
        #expect(try await a.receive() == [5])
    }

    @Test("the exported end of an export pair is a plain descriptor that talks to the local end")
    func exportPair() async throws {
        let (local, exported) = try NotificationSocket.makeExportPair(mtu: 100)
        let remote = try NotificationSocket(adopting: exported, mtu: 100)
        defer { local.close(); remote.close() }
        try await local.send([1, 2])
        #expect(try await remote.receive() == [1, 2])
        try await remote.send([3])
        #expect(try await local.receive() == [3])
    }

    @Test("a socket closed and dropped before its wait's clean-up ran still closes its descriptor: the peer sees the end")
    func closedBeforeItsWaitCleanedUpHangsUpThePeer() async throws {
        // A wait gives back its use of the descriptor once the reactor has taken its interest
        // off the epoll set, which runs later, on the reactor thread. Cancel the wait from a
        // reactor job, so that its removal is queued behind work the reactor is still doing, as
        // on a busy host: the descriptor must still be closed when the reactor gets to it.
        let peer: NotificationSocket
        let parked: Task<Void, Never>
        do {
            let (local, remote) = try NotificationSocket.makePair(mtu: 23)
            peer = remote
            parked = Task { [local] in
                _ = try? await local.receive()   // nothing sent: parks in a wait
                local.close()
            }
            while local.parkedWaitCount == 0 { await Task.yield() }
        }
        defer { peer.close() }
        let reactor = try Reactor.shared()
        await withCheckedContinuation { (cancelled: CheckedContinuation<Void, Never>) in
            reactor.enqueue {
                parked.cancel()   // the wait's removal is queued behind this job
                cancelled.resume()
            }
        }
        await parked.value       // the socket is closed and its last reference gone
        let ended = await value(of: Task { try await peer.receive() == nil }, within: .seconds(10))
        #expect(ended == true, "the peer saw no end of stream: the descriptor was never closed")
    }
}
