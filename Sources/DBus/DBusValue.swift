/// One D-Bus value of any type BlueZ uses. Containers carry their element types so empty ones still have a signature;
/// dictionaries keep their entries in order (D-Bus sends them as arrays).
package indirect enum DBusValue: Sendable, Hashable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(ObjectPath)
    case signature(Signature)
    case unixFD(UnixFileDescriptor)
    /// `a<element>`; typed even when empty.
    case array(element: Signature, [DBusValue])
    /// `a{<key><value>}`; entries in order.
    case dictionary(key: Signature, value: Signature, [DBusDictionaryEntry])
    /// `(...)`; at least one field.
    case structure([DBusValue])
    case variant(DBusValue)

    /// Computed from the value (a malformed one, e.g. an array whose elements do not match its element type, is
    /// rejected when marshalled).
    package var signature: Signature { Signature(unchecked: signatureString) }

    var signatureString: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .array(let element, _): "a" + element.rawValue
        case .dictionary(let key, let value, _): "a{" + key.rawValue + value.rawValue + "}"
        case .structure(let fields): "(" + fields.map(\.signatureString).joined() + ")"
        case .variant: "v"
        }
    }
}

package struct DBusDictionaryEntry: Sendable, Hashable {
    package var key: DBusValue
    package var value: DBusValue
    package init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// `a{oa{sa{sv}}}` from `GetManagedObjects`, decoded: path -> interface -> property -> value (variant unwrapped).
package typealias ManagedObjects = [ObjectPath: [String: [String: DBusValue]]]

// MARK: - Builders

extension DBusValue {
    package static func bytes(_ bytes: some Sequence<UInt8>) -> DBusValue {
        .array(element: "y", bytes.map { .byte($0) })
    }

    package static func strings(_ strings: [String]) -> DBusValue {
        .array(element: "s", strings.map { .string($0) })
    }

    /// `a{sv}`: each value wrapped in a variant, keys sorted so the encoding is deterministic.
    package static func vardict(_ dict: [String: DBusValue]) -> DBusValue {
        .dictionary(
            key: "s", value: "v",
            dict.sorted { $0.key < $1.key }.map {
                DBusDictionaryEntry(key: .string($0.key), value: .variant($0.value))
            })
    }

    /// `a{sa{sv}}`: interface name -> properties, as in `InterfacesAdded`.
    package static func interfacesAndProperties(_ interfaces: [String: [String: DBusValue]]) -> DBusValue {
        .dictionary(
            key: "s", value: "a{sv}",
            interfaces.sorted { $0.key < $1.key }.map {
                DBusDictionaryEntry(key: .string($0.key), value: .vardict($0.value))
            })
    }

    package static func managedObjects(_ objects: ManagedObjects) -> DBusValue {
        .dictionary(
            key: "o", value: "a{sa{sv}}",
            objects.sorted { $0.key < $1.key }.map {
                DBusDictionaryEntry(key: .objectPath($0.key), value: .interfacesAndProperties($0.value))
            })
    }
}

// MARK: - Accessors (each looks through one level of variant)

extension DBusValue {
    var lookingThroughVariant: DBusValue {
        if case .variant(let inner) = self { return inner }
        return self
    }

    package var byte: UInt8? { if case .byte(let v) = lookingThroughVariant { v } else { nil } }
    package var bool: Bool? { if case .boolean(let v) = lookingThroughVariant { v } else { nil } }
    package var int16: Int16? { if case .int16(let v) = lookingThroughVariant { v } else { nil } }
    package var uint16: UInt16? { if case .uint16(let v) = lookingThroughVariant { v } else { nil } }
    package var int32: Int32? { if case .int32(let v) = lookingThroughVariant { v } else { nil } }
    package var uint32: UInt32? { if case .uint32(let v) = lookingThroughVariant { v } else { nil } }
    package var double: Double? { if case .double(let v) = lookingThroughVariant { v } else { nil } }
    package var string: String? { if case .string(let v) = lookingThroughVariant { v } else { nil } }
    package var objectPath: ObjectPath? { if case .objectPath(let v) = lookingThroughVariant { v } else { nil } }
    package var unixFD: UnixFileDescriptor? { if case .unixFD(let v) = lookingThroughVariant { v } else { nil } }

    package var dictionaryEntries: [DBusDictionaryEntry]? {
        if case .dictionary(_, _, let v) = lookingThroughVariant { v } else { nil }
    }

    package var bytes: [UInt8]? { elements(ofArrayWith: "y") { if case .byte(let b) = $0 { b } else { nil } } }

    package var strings: [String]? {
        elements(ofArrayWith: "s") { if case .string(let s) = $0 { s } else { nil } }
    }

    /// The elements of an array of `elementSignature`, each taken out by `unwrap`; nil when this is no such array or an
    /// element does not unwrap.
    private func elements<Element>(ofArrayWith elementSignature: String,
                                   _ unwrap: (DBusValue) -> Element?) -> [Element]? {
        guard case .array(let element, let values) = lookingThroughVariant, element.rawValue == elementSignature
        else { return nil }
        let result = values.compactMap(unwrap)
        return result.count == values.count ? result : nil
    }

    /// `a{sv}` with the variant wrappers removed (a later duplicate key wins).
    package var vardict: [String: DBusValue]? {
        guard case .dictionary(_, let value, _) = lookingThroughVariant, value.rawValue == "v" else { return nil }
        return entries(keyedBy: "s", { if case .string(let name) = $0 { name } else { nil } }) { $0.lookingThroughVariant }
    }

    /// `a{sa{sv}}` (interfaces and their properties, as in `InterfacesAdded`).
    package var interfacesAndProperties: [String: [String: DBusValue]]? {
        entries(keyedBy: "s", { if case .string(let name) = $0 { name } else { nil } }) { $0.vardict }
    }

    package var managedObjects: ManagedObjects? {
        entries(keyedBy: "o", { if case .objectPath(let path) = $0 { path } else { nil } }) { $0.interfacesAndProperties }
    }

    /// A dictionary whose keys have the signature `keySignature`, each key and value taken out by `key` and `value`;
    /// nil when this is no such dictionary or an entry does not unwrap. A later duplicate key wins.
    private func entries<Key: Hashable, Value>(
        keyedBy keySignature: String, _ key: (DBusValue) -> Key?, _ value: (DBusValue) -> Value?
    ) -> [Key: Value]? {
        guard case .dictionary(let keyType, _, let entries) = lookingThroughVariant, keyType.rawValue == keySignature
        else { return nil }
        var result: [Key: Value] = [:]
        for entry in entries {
            guard let name = key(entry.key), let decoded = value(entry.value) else { return nil }
            result[name] = decoded
        }
        return result
    }
}
