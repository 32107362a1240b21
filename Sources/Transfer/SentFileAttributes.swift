/// What a file's sender says about it besides its bytes: its name (one path component, as the
/// sender had it) and its modification time. Travels only in the secure mode's HEADER when
/// the central offered the `meta` capability (docs/wire-v2.md); a message from an argument or
/// standard input has none, and neither has one from a compat peer.
///
/// The name is the sender's word and may be hostile: a receiver stores the file under a
/// sanitized name (``OutputDirectory``) and shows the name only through `SafeText`.
package struct SentFileAttributes: Sendable, Hashable {
    package var name: String
    /// Seconds since 1970-01-01 UTC (negative before).
    package var modificationSeconds: Int64
    /// 0 ... 999 999 999.
    package var modificationNanoseconds: UInt32

    package init(name: String, modificationSeconds: Int64, modificationNanoseconds: UInt32) {
        self.name = name
        self.modificationSeconds = modificationSeconds
        self.modificationNanoseconds = min(modificationNanoseconds, 999_999_999)
    }
}
