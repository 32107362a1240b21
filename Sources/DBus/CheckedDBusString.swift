/// What `ObjectPath` and `Signature` share: a string the D-Bus specification constrains, checked when made
/// (`init?(rawValue:)`) so holders can rely on it, and written as a literal where a programmer knows it is valid.
package protocol CheckedDBusString: RawRepresentable<String>, ExpressibleByStringLiteral, CustomStringConvertible {
    /// What a value is, for the message of an invalid literal ("object path").
    static var dbusTypeName: String { get }
}

extension CheckedDBusString {
    /// Traps on an invalid literal: a literal is written by a programmer, not typed by a user.
    package init(stringLiteral value: String) {
        guard let checked = Self(rawValue: value) else {
            preconditionFailure("invalid D-Bus \(Self.dbusTypeName) literal \"\(value)\"")
        }
        self = checked
    }

    package var description: String { rawValue }
}
