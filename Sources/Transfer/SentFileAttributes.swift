/// A file's name (as the sender had it) and modification time, sent only in a HEADER with `meta` (docs/wire-v2.md;
/// none for an argument, standard input or a compat peer). The name may be hostile: a receiver stores the file under
/// a sanitized name (``OutputDirectory``) and shows it only through `SafeText`.
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
