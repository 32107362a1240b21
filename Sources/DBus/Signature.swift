import CDBus

/// A D-Bus type signature ("a{sv}", "ay", "(ha)"), validated on construction; zero or more complete types (a method's
/// argument list), so the empty signature is valid.
package struct Signature: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral,
    CustomStringConvertible, CheckedDBusString
{
    package static let dbusTypeName = "signature"

    package let rawValue: String

    /// Checked by libdbus, so the rules, limits included, are exactly the bus's.
    package init?(rawValue: String) {
        guard Signature.isValid(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    init(unchecked rawValue: String) { self.rawValue = rawValue }

    /// True when the signature is exactly one complete type ("a{sv}", not "ss" nor "").
    package var isSingleCompleteType: Bool {
        rawValue.withCString { dbus_signature_validate_single($0, nil) != 0 }
    }

    /// The complete types the signature is made of ("sa{sv}i" -> ["s", "a{sv}", "i"]).
    package var completeTypes: [Signature] {
        var result: [Signature] = []
        var rest = Substring(rawValue)
        while !rest.isEmpty {
            let length = Signature.lengthOfFirstCompleteType(rest.utf8)
            result.append(Signature(unchecked: String(rest.prefix(length))))
            rest = rest.dropFirst(length)
        }
        return result
    }

    static func isValid(_ string: String) -> Bool { Names.isValid(string, using: dbus_signature_validate) }

    /// Length in bytes of the first complete type of an already validated signature.
    static func lengthOfFirstCompleteType(_ utf8: Substring.UTF8View) -> Int {
        var depth = 0
        var length = 0
        for byte in utf8 {
            length += 1
            switch byte {
            case UInt8(ascii: "a"):
                continue  // an array prefix belongs to the type that follows
            case UInt8(ascii: "("), UInt8(ascii: "{"):
                depth += 1
            case UInt8(ascii: ")"), UInt8(ascii: "}"):
                depth -= 1
            default:
                break
            }
            if depth == 0 { return length }
        }
        return length
    }
}
