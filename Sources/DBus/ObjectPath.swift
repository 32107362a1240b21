/// A D-Bus object path, validated on construction: "/" then non-empty components of ASCII letters, digits and "_"
/// separated by single "/", no trailing "/" except for the root path itself.
package struct ObjectPath: RawRepresentable, Hashable, Sendable, Comparable,
    ExpressibleByStringLiteral, CustomStringConvertible, CheckedDBusString
{
    package static let dbusTypeName = "object path"

    package let rawValue: String

    package init?(rawValue: String) {
        guard ObjectPath.isValid(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    package static let root = ObjectPath(unchecked: "/")

    init(unchecked rawValue: String) { self.rawValue = rawValue }

    package static func < (lhs: ObjectPath, rhs: ObjectPath) -> Bool { lhs.rawValue < rhs.rawValue }

    /// "/a" + "b" -> "/a/b", "/" + "b" -> "/b". `component` may hold several ("b/c"); an invalid one traps.
    package func appending(_ component: String) -> ObjectPath {
        let joined = rawValue == "/" ? "/" + component : rawValue + "/" + component
        guard let path = ObjectPath(rawValue: joined) else {
            preconditionFailure("\"\(component)\" is not a valid object path component")
        }
        return path
    }

    /// True when `self` lies strictly below `ancestor` ("/a/b" is below "/a" and "/", not below "/a/b").
    package func isDescendant(of ancestor: ObjectPath) -> Bool {
        if ancestor.rawValue == "/" { return rawValue != "/" }
        return rawValue.hasPrefix(ancestor.rawValue + "/")
    }

    package var parent: ObjectPath? {
        guard rawValue != "/" else { return nil }
        let utf8 = rawValue.utf8
        let lastSlash = utf8.lastIndex(of: UInt8(ascii: "/"))!
        if lastSlash == utf8.startIndex { return .root }
        return ObjectPath(unchecked: String(rawValue[..<lastSlash]))
    }

    static func isValid(_ string: String) -> Bool {
        let bytes = string.utf8
        guard bytes.first == UInt8(ascii: "/") else { return false }
        if bytes.count == 1 { return true }
        // Each component, between two slashes or after the last, is non-empty.
        return bytes.dropFirst().split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: false).allSatisfy {
            !$0.isEmpty && $0.allSatisfy(isComponentByte)
        }
    }

    static func isComponentByte(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z"))
            || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z"))
            || (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9"))
            || byte == UInt8(ascii: "_")
    }
}
