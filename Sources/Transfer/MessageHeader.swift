/// A HEADER record: which message, how long, its SHA-256, and with `meta` the file's name and modification time.
package struct MessageHeader: Sendable, Hashable {
    package var message: UInt32
    package var payloadLength: UInt64
    package var digest: [UInt8]
    package var metadata: FileMetadata?

    package init(message: UInt32, payloadLength: UInt64, digest: [UInt8], metadata: FileMetadata? = nil) {
        self.message = message
        self.payloadLength = payloadLength
        self.digest = digest
        self.metadata = metadata
    }
}

/// A file's name and modification time as `meta` sends them: name length (1) · UTF-8 name · seconds
/// since 1970 (8, signed) · nanoseconds (4). The name is a relative path whose components are none
/// empty, `.` or `..` (the receiver still makes each safe; this keeps the wire clean).
package struct FileMetadata: Sendable, Hashable {
    package var name: String
    package var modificationSeconds: Int64
    package var modificationNanoseconds: UInt32

    /// Nil for a name that is not a clean relative path: empty, over 255 UTF-8 bytes, with NUL, or
    /// with an empty, `.` or `..` component (so no leading or trailing `/`).
    package init?(name: String, modificationSeconds: Int64, modificationNanoseconds: UInt32) {
        guard Self.isSafeName(Array(name.utf8)), modificationNanoseconds < 1_000_000_000 else { return nil }
        self.name = name
        self.modificationSeconds = modificationSeconds
        self.modificationNanoseconds = modificationNanoseconds
    }

    package static func isSafeName(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty, bytes.count <= 255, !bytes.contains(0) else { return false }
        return bytes.split(separator: 0x2F, omittingEmptySubsequences: false).allSatisfy { component in
            !component.isEmpty && !component.elementsEqual([0x2E]) && !component.elementsEqual([0x2E, 0x2E])
        }
    }
}
