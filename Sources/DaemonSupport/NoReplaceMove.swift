#if canImport(Glibc)
import Glibc
import SystemCalls
import SystemPackage

/// Moves a file to a new name in one step without ever replacing an existing file.
///
/// `renameat2(…, RENAME_NOREPLACE)` does exactly that, but the Glibc module does not export
/// it, so it is looked up at run time. File systems that refuse the flag get `link` + `unlink`
/// (also refuses to overwrite; a crash between the two leaves the file under both names).
enum NoReplaceMove {
    private typealias RenameAt2 = @convention(c) (
        Int32, UnsafePointer<CChar>, Int32, UnsafePointer<CChar>, UInt32
    ) -> Int32

    private static let renameNoReplaceFlag: UInt32 = 1  // RENAME_NOREPLACE, linux/fs.h

    // Looked up once.
    private static let renameAt2: RenameAt2? = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "renameat2") else { return nil }
        return unsafeBitCast(symbol, to: RenameAt2.self)
    }()

    /// Moves `name` in `from` to `newName` in `to`, both directories held by descriptor: nothing is looked up by path,
    /// so a directory swapped for a symbolic link cannot send the file elsewhere. Throws `.fileExists` when taken.
    static func move(_ name: String, in from: Int32, to newName: String, in to: Int32) throws(Errno) {
        if let renameAt2 {
            if renameAt2(from, name, to, newName, renameNoReplaceFlag) == 0 { return }
            let error = Errno(rawValue: errno)
            guard error == .invalidArgument || error == .noFunction || error == .notSupported else { throw error }
        }
        guard linkat(from, name, to, newName, 0) == 0 else { throw Errno(rawValue: errno) }
        guard unlinkat(from, name, 0) == 0 else {
            let error = Errno(rawValue: errno)
            _ = unlinkat(to, newName, 0)
            throw error
        }
    }

    /// Moves `name` from the directory `from` into the directory `to` under `name`, or
    /// `name-1.ext`, `name-2.ext`… when taken; returns the name used. Both held by descriptor.
    static func moveAvoidingNames(_ name: String, in from: Int32, into to: Int32) throws(Errno) -> String {
        for attempt in 0..<10_000 {
            let candidate = attempt == 0 ? name : numbered(name, attempt)
            do {
                try move(name, in: from, to: candidate, in: to)
                return candidate
            } catch .fileExists { continue }
        }
        throw .fileExists
    }

    /// "report.txt" → "report-1.txt"; "report" → "report-1"; ".hidden" → ".hidden-1".
    static func numbered(_ name: String, _ number: Int) -> String {
        if let dot = name.lastIndex(of: "."), dot != name.startIndex {
            return "\(name[..<dot])-\(number)\(name[dot...])"
        }
        return "\(name)-\(number)"
    }

    /// Makes renames in held `directories` durable, one after the other, on ``BlockingCalls/storage`` (an `fsync`
    /// waits for the disk), without waiting for it: the flushes still follow the renames made before. Best effort: a
    /// directory that cannot be flushed loses nothing but durability. Each is duplicated now (the caller may close its
    /// own), flushed, then closed.
    static func startSyncingDirectories(descriptors: [Int32]) {
        let duplicates = descriptors.map { fcntl($0, F_DUPFD_CLOEXEC, 0) }.filter { $0 >= 0 }
        BlockingCalls.storage.submit {
            for fd in duplicates {
                _ = fsync(fd)
                _ = close(fd)
            }
        }
    }
}
#endif
