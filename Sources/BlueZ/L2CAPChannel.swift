import CBlueZ
import BluetoothModel
import SystemPackage

import Glibc  // its close(2) is called by name below

/// The address type of an LE link end, as the kernel's `sockaddr_l2` wants it.
public enum LEAddressType: UInt8, Sendable, Equatable {
    case `public` = 1   // BDADDR_LE_PUBLIC
    case random = 2     // BDADDR_LE_RANDOM

    /// From BlueZ's `AddressType` property ("public" / "random"); public when unknown.
    public init(bluez text: String?) {
        self = text == "random" ? .random : .public
    }
}

public enum L2CAPChannelError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed: the call and its errno (EAFNOSUPPORT: no Bluetooth in this kernel).
    case systemCall(String, Errno)
    case timedOut  // the peer did not accept the channel in time
    case closed  // the listener was closed

    public var description: String {
        switch self {
        case let .systemCall(call, errno): return "\(call) failed: \(errno)"
        case .timedOut: return "the channel was not set up in time"
        case .closed: return "the channel listener was closed"
        }
    }
}

/// One end of a channel: a `SOCK_SEQPACKET` socket whose packets are the session's values (one `send` = one SDU), and
/// the peer at its other end when known.
public struct AcceptedChannel: Sendable {
    public let socket: NotificationSocket
    /// The central's address, as the kernel reported it (nil: the transport does not say).
    public let peer: BluetoothAddress?

    public init(socket: NotificationSocket, peer: BluetoothAddress?) {
        self.socket = socket
        self.peer = peer
    }
}

/// A listening channel endpoint on a PSM: what a sender publishes and accepts centrals on.
public protocol ChannelListener: Sendable {
    var psm: UInt16 { get }
    /// The next central that opened a channel; waits without blocking a thread. Throws `L2CAPChannelError.closed` once
    /// `close()` was called, `CancellationError` when cancelled.
    func accept() async throws -> AcceptedChannel
    /// Stops listening; a waiting `accept` fails.
    func close()
}

/// How a role opens channels: the kernel's LE credit-based L2CAP (`L2CAPChannels`), or a stand-in in tests.
public protocol ChannelTransport: Sendable {
    /// Listens on a free dynamic PSM of `adapter` (nil: any). `receiveMTU`: the longest SDU a central may send.
    func listen(adapter: BluetoothAddress?, addressType: LEAddressType, receiveMTU: Int) throws -> any ChannelListener
    /// Opens a channel from `adapter` to `peer` on `psm` over the LE link already up. `receiveMTU`: the longest SDU the
    /// peer may send.
    func connect(adapter: BluetoothAddress?, addressType: LEAddressType, to peer: BluetoothAddress,
                 peerType: LEAddressType, psm: UInt16, receiveMTU: Int) async throws -> NotificationSocket
}

/// LE credit-based L2CAP channels (Core spec Vol 3 Part A) through the kernel's `AF_BLUETOOTH` sockets. The kernel
/// segments each SDU into link-layer frames paced by credits, so an SDU is one whole value however long, and a receiver
/// that does not read holds the sender back (credits return only as its receive buffer takes SDUs). Dynamic LE PSMs
/// (0x0080–0x00FF) need no privilege and no bluetoothd: the data never passes through D-Bus or ATT.
public struct L2CAPChannels: ChannelTransport {
    public init() {}

    /// At most this many centrals wait in the kernel for `accept`.
    static let backlog: Int32 = 4

    /// The receive MTU a channel declares, whatever SDU length the caller accepts. Linux 6.1 grants the sender credits
    /// for one receive MTU (MTU ÷ MPS + 1 PDUs), topped up as the application reads: with the MTU equal to the SDU
    /// length, the sender ran out at the end of every SDU and waited a connection event or two (5 % of a 50 ms link
    /// with 8 KiB SDUs in the lab). Newer kernels size credits from the receive buffer. Packets longer than the
    /// caller's `receiveMTU` still fail their read.
    static let receiveWindow = 65535

    public func listen(adapter: BluetoothAddress?, addressType: LEAddressType, receiveMTU: Int) throws -> any ChannelListener {
        let fd = try Self.makeSocket(adapter: adapter, addressType: addressType, receiveMTU: receiveMTU)
        var psm: UInt16 = 0
        let result = bletransfer_l2cap_listen(fd, Self.backlog, &psm)
        guard result == 0 else {
            _ = Glibc.close(fd)
            throw L2CAPChannelError.systemCall("listen(L2CAP)", Errno(rawValue: -result))
        }
        // The listening socket only ever waits for readability (a central to accept).
        let socket = try NotificationSocket(adopting: fd, limits: .init(send: 1, receive: 1), queueReport: .freeSpace)
        return L2CAPListener(socket: socket, psm: psm, receiveMTU: receiveMTU)
    }

    public func connect(adapter: BluetoothAddress?, addressType: LEAddressType, to peer: BluetoothAddress,
                        peerType: LEAddressType, psm: UInt16, receiveMTU: Int) async throws -> NotificationSocket {
        let fd = try Self.makeSocket(adapter: adapter, addressType: addressType, receiveMTU: receiveMTU)
        let started = bletransfer_l2cap_connect(fd, peer.description, peerType.rawValue, psm)
        if started != 0 && started != -EINPROGRESS {
            _ = Glibc.close(fd)
            throw L2CAPChannelError.systemCall("connect(L2CAP)", Errno(rawValue: -started))
        }
        let socket = try NotificationSocket(adopting: fd, limits: .init(send: 1, receive: receiveMTU), queueReport: .freeSpace)
        do {
            if started != 0 {
                // The kernel reports the outcome as writability plus SO_ERROR.
                try await socket.waitUntilWritable()
                let error = try socket.withDescriptor { bletransfer_socket_take_error($0) }
                if error != 0 { throw L2CAPChannelError.systemCall("connect(L2CAP)", Errno(rawValue: error)) }
            }
            socket.setLimits(try Self.limits(of: socket, acceptingAtMost: receiveMTU))
            return socket
        } catch {
            socket.close()
            throw error
        }
    }

    /// The channel's MTUs as the kernel negotiated them; received packets of at most `acceptingAtMost` bytes.
    static func limits(of socket: NotificationSocket, acceptingAtMost: Int? = nil) throws -> NotificationSocket.PacketLimits {
        try socket.withDescriptor { fd in
            var receive: UInt16 = 0
            var send: UInt16 = 0
            let result = bletransfer_l2cap_mtus(fd, &receive, &send)
            if result != 0 { throw L2CAPChannelError.systemCall("getsockopt(BT_SNDMTU/BT_RCVMTU)", Errno(rawValue: -result)) }
            return NotificationSocket.PacketLimits(send: Int(send), receive: min(Int(receive), acceptingAtMost ?? Int(receive)))
        }
    }

    private static func makeSocket(
        adapter: BluetoothAddress?, addressType: LEAddressType, receiveMTU: Int
    ) throws -> Int32 {
        let mtu = UInt16(clamping: max(receiveMTU, receiveWindow, 23))
        let fd = bletransfer_l2cap_le_socket(adapter?.description ?? "", addressType.rawValue, 0, mtu)
        guard fd >= 0 else { throw L2CAPChannelError.systemCall("socket/bind(L2CAP)", Errno(rawValue: -fd)) }
        return fd
    }
}

struct L2CAPListener: ChannelListener {
    let socket: NotificationSocket
    let psm: UInt16
    /// The longest SDU an accepted channel takes (its kernel MTU is `receiveWindow`).
    let receiveMTU: Int

    func accept() async throws -> AcceptedChannel {
        while true {
            try Task.checkCancellation()
            var peer = [CChar](repeating: 0, count: 18)
            var peerType: UInt8 = 0
            let result: Int32
            do {
                result = try socket.withDescriptor { fd in
                    peer.withUnsafeMutableBufferPointer { bletransfer_l2cap_accept(fd, $0.baseAddress, &peerType) }
                }
            } catch NotificationSocketError.closed {
                throw L2CAPChannelError.closed
            }
            if result >= 0 {
                let channel = try NotificationSocket(adopting: result, limits: .init(send: 1, receive: 1), queueReport: .freeSpace)
                do {
                    channel.setLimits(try L2CAPChannels.limits(of: channel, acceptingAtMost: receiveMTU))
                } catch {
                    channel.close()
                    throw error
                }
                let text = String(decoding: peer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                return AcceptedChannel(socket: channel, peer: BluetoothAddress(text))
            }
            switch -result {
            case EAGAIN, EINTR, ECONNABORTED:
                do {
                    try await socket.waitUntil(.readable)
                } catch NotificationSocketError.closed {
                    throw L2CAPChannelError.closed
                }
            default:
                throw L2CAPChannelError.systemCall("accept(L2CAP)", Errno(rawValue: -result))
            }
        }
    }

    func close() { socket.close() }
}
