import CBlueZ
import SystemCalls
import SystemPackage

#if canImport(Glibc)
import Glibc
#endif

/// The status a management command ends with (doc/mgmt-api.txt, "Error Codes").
package struct ManagementStatus: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
    package let rawValue: UInt8
    package init(rawValue: UInt8) { self.rawValue = rawValue }

    package static let success = ManagementStatus(rawValue: 0x00)
    package static let notSupported = ManagementStatus(rawValue: 0x0C)
    /// The socket is not trusted: the process lacks CAP_NET_ADMIN.
    package static let permissionDenied = ManagementStatus(rawValue: 0x14)

    private static let names: [UInt8: String] = [
        0x00: "Success", 0x01: "Unknown Command", 0x0A: "Busy", 0x0C: "Not Supported", 0x0D: "Invalid Parameters",
        0x0F: "Not Powered", 0x11: "Invalid Index", 0x14: "Permission Denied",
    ]

    package var description: String { Self.names[rawValue] ?? "status 0x\(String(rawValue, radix: 16))" }
}

package enum ManagementError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A system call failed: the call and its errno (EAFNOSUPPORT: no Bluetooth in the kernel).
    case systemCall(String, Errno)
    case refused(command: String, ManagementStatus)  // the kernel answered with this status
    case timedOut(command: String)  // no answer within the bound
    case malformed(command: String)  // the answer was shorter than its format

    package var isPermissionDenied: Bool {
        if case .refused(_, .permissionDenied) = self { return true }
        if case .systemCall(_, let errno) = self { return errno == .notPermitted || errno == .permissionDenied }
        return false
    }

    package var description: String {
        switch self {
        case let .systemCall(call, errno): return "\(call) failed: \(errno)"
        case let .refused(command, status): return "\(command): \(status)"
        case let .timedOut(command): return "\(command): no answer from the kernel"
        case let .malformed(command): return "\(command): the kernel's answer is too short"
        }
    }
}

/// One command on the kernel's management channel (doc/mgmt-api.txt), little-endian as the channel carries it.
package struct ManagementCommand: Sendable, Equatable {
    package var code: UInt16
    package var controller: UInt16
    package var parameters: [UInt8]
    package var name: String

    package init(code: UInt16, controller: UInt16, parameters: [UInt8] = [], name: String) {
        self.code = code
        self.controller = controller
        self.parameters = parameters
        self.name = name
    }

    /// The bytes written to the socket: code, controller index, parameter length, parameters.
    package var encoded: [UInt8] {
        var bytes: [UInt8] = []
        bytes.appendLittleEndian(code)
        bytes.appendLittleEndian(controller)
        bytes.appendLittleEndian(UInt16(parameters.count))
        return bytes + parameters
    }
}

package struct ManagementReply: Sendable, Equatable {
    package var code: UInt16
    package var status: ManagementStatus
    package var parameters: [UInt8]

    /// The reply to `command` in `packet`: a Command Complete (0x0001) or Command Status (0x0002) event for the same
    /// code and controller; nil for any other event (the channel also carries events no one asked for).
    package static func answering(_ command: ManagementCommand, in packet: [UInt8]) -> ManagementReply? {
        guard packet.count >= 6 else { return nil }
        let event = UInt16(littleEndianBytes: packet[0..<2])
        let controller = UInt16(littleEndianBytes: packet[2..<4])
        let length = Int(UInt16(littleEndianBytes: packet[4..<6]))
        guard controller == command.controller, packet.count >= 6 + length, length >= 3,
              event == 0x0001 || event == 0x0002 else { return nil }
        let body = Array(packet[6..<(6 + length)])
        let code = UInt16(littleEndianBytes: body[0..<2])
        guard code == command.code else { return nil }
        return ManagementReply(code: code, status: ManagementStatus(rawValue: body[2]),
                               parameters: event == 0x0001 ? Array(body[3...]) : [])
    }
}

/// The kernel's management channel: one socket, one command at a time, each answer awaited within a bound. The calls
/// block (a send and a poll of at most `replyLimit`): `run` makes them on `BlockingCalls.storage`'s threads, whose
/// calls are all bounded, not on the cooperative pool.
package final class ManagementChannel: Sendable {
    private let fd: Int32
    /// The kernel answers from its own work queue within milliseconds; a busy controller may take an HCI round trip.
    package static let replyLimit: Duration = .seconds(3)

    package init() throws(ManagementError) {
        let result = bletransfer_mgmt_socket()
        guard result >= 0 else { throw .systemCall("socket(HCI_CHANNEL_CONTROL)", Errno(rawValue: -result)) }
        fd = result
    }

    deinit { _ = Glibc.close(fd) }

    /// Opens a channel, sends `command`, waits for its answer, closes, off the cooperative pool.
    package static func run(_ command: ManagementCommand) async throws(ManagementError) -> ManagementReply {
        try await BlockingCalls.storage.run { () throws(ManagementError) -> ManagementReply in
            try ManagementChannel().send(command)
        }
    }

    /// Sends `command` and returns its reply; a reply other than success throws `.refused`.
    package func send(_ command: ManagementCommand) throws(ManagementError) -> ManagementReply {
        let bytes = command.encoded
        let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count else {
            throw .systemCall("write(\(command.name))", Errno(rawValue: written < 0 ? errno : EIO))
        }
        let deadline = ContinuousClock.now + Self.replyLimit
        var buffer = [UInt8](repeating: 0, count: 1024)
        while true {
            let left = deadline - ContinuousClock.now
            guard left > .zero else { throw .timedOut(command: command.name) }
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let milliseconds = Int32(max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000))
            let ready = poll(&entry, 1, milliseconds)
            if ready < 0 {
                if errno == EINTR { continue }
                throw .systemCall("poll(\(command.name))", Errno(rawValue: errno))
            }
            if ready == 0 { continue }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                throw .systemCall("read(\(command.name))", Errno(rawValue: errno))
            }
            guard let reply = ManagementReply.answering(command, in: Array(buffer.prefix(count))) else { continue }
            guard reply.status == .success else { throw .refused(command: command.name, reply.status) }
            return reply
        }
    }
}

extension Array where Element == UInt8 {
    mutating func appendLittleEndian<T: FixedWidthInteger & UnsignedInteger>(_ value: T) {
        for shift in stride(from: 0, to: T.bitWidth, by: 8) { append(UInt8(truncatingIfNeeded: value >> shift)) }
    }
}

extension FixedWidthInteger where Self: UnsignedInteger {
    init<C: Collection>(littleEndianBytes bytes: C) where C.Element == UInt8 {
        var value: Self = 0
        for (index, byte) in bytes.prefix(Self.bitWidth / 8).enumerated() { value |= Self(byte) << (8 * index) }
        self = value
    }
}
