import CDBus

/// Reads the arguments of a libdbus message into `DBusValue`s. Messages from the bus (or `dbus_message_demarshal`) were
/// validated by libdbus, so the reader meets only well-formed data; it still never trusts an unknown type code. Every
/// `h` read is a new fd (libdbus dups it), wrapped in a `UnixFileDescriptor` at once so dropping the values closes it.
enum MessageReader {
    static func readArguments(of message: OpaquePointer) throws -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(message, &iter) != 0 else { return [] }
        return try readAll(&iter)
    }

    private static func readAll(_ iter: inout DBusMessageIter) throws -> [DBusValue] {
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != CDBUS_TYPE_INVALID {
            values.append(try read(&iter))
            dbus_message_iter_next(&iter)
        }
        return values
    }

    private static func basic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ zero: T) -> T {
        var value = zero
        withUnsafeMutableBytes(of: &value) { dbus_message_iter_get_basic(&iter, $0.baseAddress) }
        return value
    }

    private static func cString(_ iter: inout DBusMessageIter) -> String {
        var pointer: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &pointer)
        return pointer.map { String(cString: $0) } ?? ""
    }

    private static func read(_ iter: inout DBusMessageIter) throws -> DBusValue {
        let type = dbus_message_iter_get_arg_type(&iter)
        switch type {
        case CDBUS_TYPE_BYTE: return .byte(basic(&iter, UInt8(0)))
        case CDBUS_TYPE_BOOLEAN: return .boolean(basic(&iter, dbus_bool_t(0)) != 0)
        case CDBUS_TYPE_INT16: return .int16(basic(&iter, Int16(0)))
        case CDBUS_TYPE_UINT16: return .uint16(basic(&iter, UInt16(0)))
        case CDBUS_TYPE_INT32: return .int32(basic(&iter, Int32(0)))
        case CDBUS_TYPE_UINT32: return .uint32(basic(&iter, UInt32(0)))
        case CDBUS_TYPE_INT64: return .int64(basic(&iter, Int64(0)))
        case CDBUS_TYPE_UINT64: return .uint64(basic(&iter, UInt64(0)))
        case CDBUS_TYPE_DOUBLE: return .double(basic(&iter, Double(0)))
        case CDBUS_TYPE_STRING: return .string(cString(&iter))
        case CDBUS_TYPE_OBJECT_PATH:
            let raw = cString(&iter)
            guard let path = ObjectPath(rawValue: raw) else { throw malformed("object path \"\(raw)\"") }
            return .objectPath(path)
        case CDBUS_TYPE_SIGNATURE:
            let raw = cString(&iter)
            guard let signature = Signature(rawValue: raw) else { throw malformed("signature \"\(raw)\"") }
            return .signature(signature)
        case CDBUS_TYPE_UNIX_FD:
            let fd = basic(&iter, Int32(-1))
            guard fd >= 0 else { throw malformed("unix fd (index without fd)") }
            return .unixFD(UnixFileDescriptor(owning: fd))
        case CDBUS_TYPE_ARRAY:
            return try readArray(&iter)
        case CDBUS_TYPE_STRUCT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .structure(try readAll(&sub))
        case CDBUS_TYPE_VARIANT:
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            guard dbus_message_iter_get_arg_type(&sub) != CDBUS_TYPE_INVALID else { throw malformed("empty variant") }
            return .variant(try read(&sub))
        default:
            throw malformed("type code \(type)")
        }
    }

    private static func readArray(_ iter: inout DBusMessageIter) throws -> DBusValue {
        guard let signaturePointer = dbus_message_iter_get_signature(&iter) else {
            throw DBusError(name: DBusError.noMemoryName, message: "out of memory")
        }
        let arraySignature = String(cString: signaturePointer)
        dbus_free(signaturePointer)
        let elementSignature = String(arraySignature.dropFirst())  // drop the "a"
        var sub = DBusMessageIter()
        dbus_message_iter_recurse(&iter, &sub)

        if elementSignature.hasPrefix("{") {
            // a{kv}: split "{kv}" into its key (always one basic type code) and value.
            let inner = elementSignature.dropFirst().dropLast()
            let key = Signature(unchecked: String(inner.prefix(1)))
            let value = Signature(unchecked: String(inner.dropFirst()))
            var entries: [DBusDictionaryEntry] = []
            while dbus_message_iter_get_arg_type(&sub) == CDBUS_TYPE_DICT_ENTRY {
                var pair = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &pair)
                let k = try read(&pair)
                guard dbus_message_iter_next(&pair) != 0 else { throw malformed("dictionary entry without value") }
                let v = try read(&pair)
                entries.append(DBusDictionaryEntry(key: k, value: v))
                dbus_message_iter_next(&sub)
            }
            return .dictionary(key: key, value: value, entries)
        }

        let element = Signature(unchecked: elementSignature)
        if elementSignature == "y" {
            var pointer: UnsafeRawPointer? = nil
            var count: Int32 = 0
            if dbus_message_iter_get_arg_type(&sub) == CDBUS_TYPE_BYTE {
                dbus_message_iter_get_fixed_array(&sub, &pointer, &count)
            }
            guard let pointer, count > 0 else { return .array(element: element, []) }
            let buffer = UnsafeBufferPointer(start: pointer.assumingMemoryBound(to: UInt8.self), count: Int(count))
            return .array(element: element, buffer.map { .byte($0) })
        }
        return .array(element: element, try readAll(&sub))
    }

    private static func malformed(_ what: String) -> DBusError {
        DBusError.invalidArgs("malformed D-Bus message: unexpected \(what)")
    }
}
