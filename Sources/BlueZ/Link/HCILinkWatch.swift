import CBlueZ
import Synchronization
import SystemPackage

/// Why a controller's link events cannot be watched, or a link command not sent.
package enum HCILinkWatchError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The process lacks CAP_NET_RAW: the kernel passes no LE event to an unprivileged raw socket, nor takes commands.
    case notPermitted
    case systemCall(String, Errno)

    package var description: String {
        switch self {
        case .notPermitted: return "watching the link needs CAP_NET_RAW"
        case let .systemCall(call, errno): return "\(call) failed: \(errno)"
        }
    }
}

/// A controller's LE link events, watched on a raw HCI socket filtered to them, which also sends the per-connection
/// commands a privileged process may use (LE Set PHY, LE Connection Update). Needs CAP_NET_RAW (`open` says so).
/// The socket sees events from the moment it opens: a link made before knows only what later events change. The
/// kernel processes the same events as before: this is an observer, and its commands are answered to both alike.
package final class HCILinkWatch: Sendable {
    private let socket: NotificationSocket
    private let ledger = Mutex(LinkEventLedger())

    private init(socket: NotificationSocket) {
        self.socket = socket
    }

    package static func open(controller index: UInt16) throws(HCILinkWatchError) -> HCILinkWatch {
        let fd = bletransfer_hci_event_socket(index)
        if fd == -EPERM || fd == -EACCES { throw .notPermitted }
        guard fd >= 0 else { throw .systemCall("socket(HCI_CHANNEL_RAW)", Errno(rawValue: -fd)) }
        do {
            let socket = try NotificationSocket(adopting: fd, limits: .init(send: 260, receive: 260), queueReport: .freeSpace)
            return HCILinkWatch(socket: socket)
        } catch {
            throw .systemCall("fcntl(O_NONBLOCK)", .badFileDescriptor)
        }
    }

    package func parameters(of handle: UInt16) -> LinkParameters? { ledger.withLock { $0.links[handle] } }

    /// Reads events until cancelled or the socket closes, calling `changed` with each link's new parameters (nil
    /// values: not reported yet) and `gone` with a removed link's handle.
    package func run(changed: @Sendable (LinkParameters) -> Void, gone: @Sendable (UInt16) -> Void) async {
        while !Task.isCancelled {
            let packet: [UInt8]?
            do {
                packet = try await socket.receive()
            } catch {
                return
            }
            guard let packet else { return }
            let update: (UInt16, LinkParameters?)? = ledger.withLock { ledger in
                guard let handle = ledger.apply(packet) else { return nil }
                return (handle, ledger.links[handle])
            }
            guard let (handle, parameters) = update else { continue }
            if let parameters { changed(parameters) } else { gone(handle) }
        }
    }

    /// Sends one HCI command (the controller's answer arrives as an event the kernel handles).
    package func send(_ command: LinkCommand) throws(HCILinkWatchError) {
        do {
            guard try socket.trySend(command.packet) else { throw HCILinkWatchError.systemCall("send(HCI command)", .resourceTemporarilyUnavailable) }
        } catch let error as HCILinkWatchError {
            throw error
        } catch {
            throw .notPermitted
        }
    }

    package func close() { socket.close() }
}

/// The per-connection HCI commands a privileged process may send for its link.
package enum LinkCommand: Sendable, Equatable {
    /// LE Set PHY (0x2032): the PHYs this host prefers both ways.
    case setPHY(handle: UInt16, phy: LEPHY)
    /// LE Connection Update (0x2013), the central's: an interval range (1.25 ms units), the peripheral latency and the
    /// supervision timeout (10 ms units).
    case updateConnection(handle: UInt16, minInterval: UInt16, maxInterval: UInt16, latency: UInt16, timeout: UInt16)

    /// The command as a raw HCI socket sends it: type 0x01, opcode, length, parameters.
    package var packet: [UInt8] {
        var parameters: [UInt8] = []
        let opcode: UInt16
        switch self {
        case let .setPHY(handle, phy):
            opcode = 0x2032
            let mask: UInt8 = phy == .le2M ? 0x02 : (phy == .coded ? 0x04 : 0x01)
            parameters.appendLittleEndian(handle)
            parameters += [0x00, mask, mask]
            parameters.appendLittleEndian(UInt16(0))
        case let .updateConnection(handle, minInterval, maxInterval, latency, timeout):
            opcode = 0x2013
            for value in [handle, minInterval, maxInterval, latency, timeout, 0, 0] {
                parameters.appendLittleEndian(value)
            }
        }
        var bytes: [UInt8] = [0x01]
        bytes.appendLittleEndian(opcode)
        bytes.append(UInt8(parameters.count))
        return bytes + parameters
    }
}
