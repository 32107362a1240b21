import CDBus

/// Owns one reference to a libdbus message and drops it on deinit.
///
/// `@unchecked Sendable`: a libdbus message is safe to hand between threads (its reference count is atomic); it is not
/// safe to mutate from two threads at once, and we never do: it is built by one task, then only read (sent, parsed).
final class Message: @unchecked Sendable {
    let pointer: OpaquePointer

    /// Adopts a reference the caller already owns.
    init(adopting pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit { dbus_message_unref(pointer) }

    static func methodCall(
        destination: String?, path: ObjectPath, interface: String?, method: String, arguments: [DBusValue] = []
    ) throws -> Message {
        if let destination { try Names.checkBusName(destination) }
        if let interface { try Names.checkInterface(interface) }
        try Names.checkMember(method)
        return try Message(dbus_message_new_method_call(destination, path.rawValue, interface, method), arguments)
    }

    static func signal(
        path: ObjectPath, interface: String, member: String, arguments: [DBusValue] = []
    ) throws -> Message {
        try Names.checkInterface(interface)
        try Names.checkMember(member)
        return try Message(dbus_message_new_signal(path.rawValue, interface, member), arguments)
    }

    private convenience init(_ pointer: OpaquePointer?, _ arguments: [DBusValue]) throws {
        guard let pointer else { throw DBusError(name: DBusError.noMemoryName, message: "out of memory") }
        self.init(adopting: pointer)
        try append(arguments)
    }

    func makeReturn() -> Message { Message(adopting: dbus_message_new_method_return(pointer)!) }

    /// An error reply for `call`. Invalid names become Failed, and messages are cut at a NUL, so no user-supplied text
    /// can reach a libdbus assertion.
    func makeError(_ error: DBusError) -> Message {
        let name = Names.isValidErrorName(error.name) ? error.name : DBusError.failedName
        let text = String(
            error.message.split(separator: "\0", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
        return Message(adopting: dbus_message_new_error(pointer, name, text)!)
    }

    func append(_ values: [DBusValue]) throws { try MessageWriter.append(values, to: pointer) }

    func arguments() throws -> [DBusValue] { try MessageReader.readArguments(of: pointer) }

    var type: Int32 { dbus_message_get_type(pointer) }
    var sender: String { dbus_message_get_sender(pointer).map { String(cString: $0) } ?? "" }
    var path: ObjectPath? {
        dbus_message_get_path(pointer).flatMap { ObjectPath(rawValue: String(cString: $0)) }
    }
    var interface: String? { dbus_message_get_interface(pointer).map { String(cString: $0) } }
    var member: String? { dbus_message_get_member(pointer).map { String(cString: $0) } }
    var signatureString: String { dbus_message_get_signature(pointer).map { String(cString: $0) } ?? "" }
    var errorName: String? { dbus_message_get_error_name(pointer).map { String(cString: $0) } }
    var noReplyExpected: Bool { dbus_message_get_no_reply(pointer) != 0 }

    /// For an error message: its name and its first string argument (the human message).
    func asError() -> DBusError {
        var text = ""
        var iter = DBusMessageIter()
        if dbus_message_iter_init(pointer, &iter) != 0,
            dbus_message_iter_get_arg_type(&iter) == CDBUS_TYPE_STRING
        {
            var cString: UnsafePointer<CChar>? = nil
            dbus_message_iter_get_basic(&iter, &cString)
            if let cString { text = String(cString: cString) }
        }
        return DBusError(name: errorName ?? DBusError.failedName, message: text)
    }
}

/// Message type codes (DBUS_MESSAGE_TYPE_*; the macros do not import into Swift).
enum MessageType {
    static let methodCall: Int32 = 1
    static let error: Int32 = 3
    static let signal: Int32 = 4
}

/// Checks of bus, interface, member and error names before libdbus sees them (it asserts on invalid names, aborting).
enum Names {
    typealias Validator = (UnsafePointer<CChar>?, UnsafeMutablePointer<CDBus.DBusError>?) -> dbus_bool_t

    static func checkBusName(_ name: String) throws { try check(name, "bus", dbus_validate_bus_name) }
    static func checkInterface(_ name: String) throws { try check(name, "interface", dbus_validate_interface) }
    static func checkMember(_ name: String) throws { try check(name, "member", dbus_validate_member) }
    static func isValidErrorName(_ name: String) -> Bool { isValid(name, using: dbus_validate_error_name) }

    private static func check(_ name: String, _ kind: String, _ validate: Validator) throws {
        guard isValid(name, using: validate) else { throw DBusError.invalidArgs("invalid \(kind) name \"\(name)\"") }
    }

    static func isValid(_ name: String, using validate: Validator) -> Bool {
        // libdbus reads a C string: an embedded NUL would silently truncate it.
        guard !name.utf8.contains(0) else { return false }
        return name.withCString { validate($0, nil) != 0 }
    }
}
