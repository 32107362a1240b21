@testable import DBus
import CDBus

// MARK: - Wire form (used to check what libdbus accepts from the outside)

extension Message {
    /// The message in D-Bus wire format. Messages carrying unix fds cannot be marshalled.
    func marshalled() throws -> [UInt8] {
        if dbus_message_get_serial(pointer) == 0 { dbus_message_set_serial(pointer, 1) }
        var buffer: UnsafeMutablePointer<CChar>? = nil
        var length: Int32 = 0
        guard dbus_message_marshal(pointer, &buffer, &length) != 0, let buffer else {
            throw DBus.DBusError.failed("the message cannot be marshalled")
        }
        defer { dbus_free(buffer) }
        return buffer.withMemoryRebound(to: UInt8.self, capacity: Int(length)) {
            Array(UnsafeBufferPointer(start: $0, count: Int(length)))
        }
    }

    /// Parses wire-format bytes; malformed input is rejected with a DBusError (libdbus
    /// validates the header and the body before it returns a message).
    static func demarshal(_ bytes: [UInt8]) throws -> Message {
        // libdbus aborts on a NULL buffer (its argument checks are fatal by default).
        guard !bytes.isEmpty else { throw DBus.DBusError.invalidArgs("malformed D-Bus message: no bytes") }
        guard bytes.count <= Int(Int32.max) else { throw DBus.DBusError.invalidArgs("message too large") }
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        let pointer = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) {
                dbus_message_demarshal($0.baseAddress, Int32($0.count), &error)
            }
        }
        guard let pointer else { throw DBus.DBusError(taking: &error, fallback: "malformed D-Bus message") }
        return Message(adopting: pointer)
    }
}
