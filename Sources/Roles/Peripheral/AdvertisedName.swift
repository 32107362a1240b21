/// Rules for the local name a peripheral advertises.
///
/// A legacy advertising PDU holds 31 bytes. With the flags (3 bytes) and one 128-bit service
/// UUID (18 bytes) only 10 remain, so BlueZ puts the name in the scan response, which holds 31
/// bytes: 2 for the field header, at most 29 for the name. A longer name would be cut by BlueZ
/// (sent as a "shortened" name), which a central filtering on the full name would miss.
package enum AdvertisedName {
    /// The longest name, in UTF-8 bytes, that fits a scan response whole.
    package static let maximumByteCount = 29

    package struct Invalid: Error, Sendable, Equatable, CustomStringConvertible {
        package var description: String
    }

    /// Returns the name if it fits whole; throws a one-line reason otherwise.
    package static func validate(_ name: String) throws(Invalid) -> String {
        if name.isEmpty { throw Invalid(description: "the local name is empty") }
        if name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
            throw Invalid(description: "the local name contains control characters")
        }
        let length = name.utf8.count
        if length > maximumByteCount {
            throw Invalid(description:
                "the local name is \(length) bytes in UTF-8; at most \(maximumByteCount) fit an advertisement's scan response")
        }
        return name
    }
}
