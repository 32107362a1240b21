import CDBus

/// Appends `DBusValue`s to a libdbus message. Every value is checked first (types consistent with their signatures,
/// strings without NUL, nesting within the specification's limits, fds still open): libdbus answers bad input to its
/// append functions with an assertion that aborts the process.
enum MessageWriter {
    static func append(_ values: [DBusValue], to message: OpaquePointer) throws {
        for value in values { try validate(value) }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(message, &iter)
        for value in values {
            try append(value, to: &iter)
        }
    }

    // MARK: Validation

    /// The D-Bus specification's limits: 32 nested arrays, 32 nested structs (dict entries count as structs), 64
    /// containers in total, variants included.
    static let maximumArrayDepth = 32
    static let maximumStructDepth = 32
    static let maximumTotalDepth = 64

    struct Depth {
        var arrays = 0
        var structs = 0
        var total = 0

        /// One container further in; throws when that passes the limits.
        func entering(arrays: Int = 0, structs: Int = 0, total: Int) throws -> Depth {
            let inner = Depth(arrays: self.arrays + arrays, structs: self.structs + structs, total: self.total + total)
            guard inner.arrays <= maximumArrayDepth, inner.structs <= maximumStructDepth, inner.total <= maximumTotalDepth
            else { throw DBusError.invalidArgs("value nested too deeply for D-Bus") }
            return inner
        }
    }

    static func validate(_ value: DBusValue) throws { try validate(value, depth: Depth()) }

    private static func validate(_ value: DBusValue, depth: Depth) throws {
        switch value {
        case .byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double,
            .objectPath, .signature:
            return
        case .string(let string):
            // libdbus aborts on invalid UTF-8, which Swift strings never are: what is left to reject is an embedded NUL.
            guard !string.utf8.contains(0) else {
                throw DBusError.invalidArgs("strings sent over D-Bus cannot contain NUL characters")
            }
        case .unixFD(let fd):
            guard fd.rawValue != nil else {
                throw DBusError.invalidArgs("a unix fd argument was already closed or taken")
            }
        case .array(let element, let elements):
            let inner = try depth.entering(arrays: 1, total: 1)
            guard element.isSingleCompleteType else {
                throw DBusError.invalidArgs("array element type \"\(element)\" is not a single complete type")
            }
            let expected = element.rawValue
            for item in elements {
                guard item.signatureString == expected else {
                    throw DBusError.invalidArgs(
                        "array of \"\(expected)\" holds a value of type \"\(item.signatureString)\"")
                }
                try validate(item, depth: inner)
            }
        case .dictionary(let key, let valueType, let entries):
            let signature = "a{" + key.rawValue + valueType.rawValue + "}"
            let valid = signature.withCString { dbus_signature_validate_single($0, nil) != 0 }
            guard valid else {
                throw DBusError.invalidArgs("\"\(signature)\" is not a valid dictionary type")
            }
            let inner = try depth.entering(arrays: 1, structs: 1, total: 2)
            for entry in entries {
                guard entry.key.signatureString == key.rawValue,
                    entry.value.signatureString == valueType.rawValue
                else {
                    throw DBusError.invalidArgs(
                        "dictionary \"\(signature)\" holds an entry of types \"\(entry.key.signatureString)\", \"\(entry.value.signatureString)\""
                    )
                }
                try validate(entry.key, depth: inner)
                try validate(entry.value, depth: inner)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw DBusError.invalidArgs("a struct must have at least one field") }
            let inner = try depth.entering(structs: 1, total: 1)
            for field in fields { try validate(field, depth: inner) }
        case .variant(let inner):
            try validate(inner, depth: depth.entering(total: 1))
        }
        // A complete type's signature must itself be valid (length limit of 255 included).
        if depth.total == 0 {
            let signature = value.signatureString
            guard signature.withCString({ dbus_signature_validate_single($0, nil) != 0 }) else {
                throw DBusError.invalidArgs("\"\(signature.prefix(80))\" is not a valid D-Bus type")
            }
        }
    }

    // MARK: Appending

    private static func append(_ value: DBusValue, to iter: inout DBusMessageIter) throws {
        switch value {
        case .byte(var v): try appendBasic(&iter, CDBUS_TYPE_BYTE, &v)
        case .boolean(let b):
            var v: dbus_bool_t = b ? 1 : 0
            try appendBasic(&iter, CDBUS_TYPE_BOOLEAN, &v)
        case .int16(var v): try appendBasic(&iter, CDBUS_TYPE_INT16, &v)
        case .uint16(var v): try appendBasic(&iter, CDBUS_TYPE_UINT16, &v)
        case .int32(var v): try appendBasic(&iter, CDBUS_TYPE_INT32, &v)
        case .uint32(var v): try appendBasic(&iter, CDBUS_TYPE_UINT32, &v)
        case .int64(var v): try appendBasic(&iter, CDBUS_TYPE_INT64, &v)
        case .uint64(var v): try appendBasic(&iter, CDBUS_TYPE_UINT64, &v)
        case .double(var v): try appendBasic(&iter, CDBUS_TYPE_DOUBLE, &v)
        case .string(let s): try appendString(&iter, CDBUS_TYPE_STRING, s)
        case .objectPath(let p): try appendString(&iter, CDBUS_TYPE_OBJECT_PATH, p.rawValue)
        case .signature(let g): try appendString(&iter, CDBUS_TYPE_SIGNATURE, g.rawValue)
        case .unixFD(let fd):
            // libdbus dups the fd; hold the value's lock so it cannot be closed meanwhile.
            try fd.withRawValue { raw in
                guard var raw else {
                    throw DBusError.invalidArgs("a unix fd argument was already closed or taken")
                }
                guard dbus_message_iter_append_basic(&iter, CDBUS_TYPE_UNIX_FD, &raw) != 0 else {
                    throw DBusError.failed("could not attach unix fd \(raw) to the message (dup failed)")
                }
            }
        case .array(let element, let elements):
            try withContainer(&iter, CDBUS_TYPE_ARRAY, element.rawValue) { sub in
                if element.rawValue == "y" {
                    // Fixed-size fast path: one copy instead of one call per byte.
                    var bytes = elements.map { item -> UInt8 in
                        if case .byte(let b) = item { return b }
                        return 0
                    }
                    let ok = bytes.withUnsafeMutableBufferPointer { buffer -> Bool in
                        var base = UnsafeRawPointer(buffer.baseAddress)
                        return dbus_message_iter_append_fixed_array(
                            &sub, CDBUS_TYPE_BYTE, &base, Int32(buffer.count)) != 0
                    }
                    if !ok { throw outOfMemory }
                } else {
                    for item in elements { try append(item, to: &sub) }
                }
            }
        case .dictionary(let key, let valueType, let entries):
            try withContainer(&iter, CDBUS_TYPE_ARRAY, "{" + key.rawValue + valueType.rawValue + "}") { sub in
                for entry in entries {
                    try withContainer(&sub, CDBUS_TYPE_DICT_ENTRY, nil) { pair in
                        try append(entry.key, to: &pair)
                        try append(entry.value, to: &pair)
                    }
                }
            }
        case .structure(let fields):
            try withContainer(&iter, CDBUS_TYPE_STRUCT, nil) { sub in
                for field in fields { try append(field, to: &sub) }
            }
        case .variant(let inner):
            try withContainer(&iter, CDBUS_TYPE_VARIANT, inner.signatureString) { sub in
                try append(inner, to: &sub)
            }
        }
    }

    private static let outOfMemory = DBusError(name: DBusError.noMemoryName, message: "out of memory")

    private static func appendBasic<T: BitwiseCopyable>(
        _ iter: inout DBusMessageIter, _ type: Int32, _ value: inout T
    ) throws {
        let ok = withUnsafeMutableBytes(of: &value) {
            dbus_message_iter_append_basic(&iter, type, $0.baseAddress) != 0
        }
        guard ok else { throw outOfMemory }
    }

    private static func appendString(_ iter: inout DBusMessageIter, _ type: Int32, _ string: String) throws {
        let ok = string.withCString { cString -> Bool in
            var pointer: UnsafePointer<CChar>? = cString
            return dbus_message_iter_append_basic(&iter, type, &pointer) != 0
        }
        if !ok { throw outOfMemory }
    }

    private static func withContainer(
        _ iter: inout DBusMessageIter, _ type: Int32, _ contained: String?,
        _ body: (inout DBusMessageIter) throws -> Void
    ) throws {
        var sub = DBusMessageIter()
        let opened: Bool
        if let contained {
            opened = contained.withCString { dbus_message_iter_open_container(&iter, type, $0, &sub) != 0 }
        } else {
            opened = dbus_message_iter_open_container(&iter, type, nil, &sub) != 0
        }
        guard opened else { throw outOfMemory }
        do {
            try body(&sub)
        } catch {
            dbus_message_iter_abandon_container(&iter, &sub)
            throw error
        }
        guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw outOfMemory }
    }
}
