#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a payload's file could not be read (or written, while a message comes in): call, file and error in one line.
package struct PayloadReadError: Error, Sendable, Hashable, CustomStringConvertible {
    package var description: String

    package init(_ description: String) { self.description = description }

    package static func failed(_ call: String, _ path: String, errno code: Int32) -> PayloadReadError {
        // strerror's words, lower-cased as a clause after the colon: "permission denied".
        let reason = String(cString: strerror(code))
        return PayloadReadError("\(call) '\(path)': \(reason.prefix(1).lowercased() + reason.dropFirst())")
    }
}

/// An open file a payload is read from or written to, closed when the last payload using it is gone.
/// `removesPathWhenReleased`: a partial file of a message coming in, removed by name then, so a failed transfer leaves
/// nothing behind (one stored was linked to its own name before).
///
/// Sendable: every stored property is immutable; `pread`/`pwrite` take their offset and share no file position, so the
/// descriptor is safe to use from any thread.
package final class PayloadFile: Sendable, Hashable, CustomStringConvertible {
    package let descriptor: Int32
    /// Where the file was opened (for messages and, for a partial file, for linking it).
    package let path: String
    package let removesPathWhenReleased: Bool

    package init(descriptor: Int32, path: String, removesPathWhenReleased: Bool = false) {
        self.descriptor = descriptor
        self.path = path
        self.removesPathWhenReleased = removesPathWhenReleased
    }

    deinit {
        if removesPathWhenReleased { _ = unlink(path) }
        _ = close(descriptor)
    }

    /// Opens `path` to be read, refusing what is not a regular file (a FIFO cannot be read twice, and a message's digest
    /// needs a first pass). Returns the file and its status (its length).
    package static func openForReading(_ path: String) throws(PayloadReadError) -> (PayloadFile, stat) {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard descriptor >= 0 else { throw .failed("cannot open", path, errno: errno) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            let code = errno
            _ = close(descriptor)
            throw .failed("cannot examine", path, errno: code)
        }
        guard status.st_mode & S_IFMT == S_IFREG else {
            _ = close(descriptor)
            throw PayloadReadError("'\(path)' is not a regular file")
        }
        return (PayloadFile(descriptor: descriptor, path: path), status)
    }

    /// `count` bytes at `offset`; fewer on disk (the file shrank since measured) is an error, as the message's length
    /// and digest were announced.
    package func read(at offset: Int, count: Int) throws(PayloadReadError) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let got = bytes.withUnsafeMutableBytes { buffer in
                pread(descriptor, buffer.baseAddress! + done, count - done, off_t(offset + done))
            }
            if got < 0 {
                if errno == EINTR { continue }
                throw .failed("cannot read", path, errno: errno)
            }
            guard got > 0 else {
                throw PayloadReadError("'\(path)' became shorter while it was sent (\(offset + done) bytes left of \(offset + count))")
            }
            done += got
        }
        return bytes
    }

    /// Writes `bytes` at `offset` (a message coming in).
    package func write(_ bytes: some Collection<UInt8>, at offset: Int) throws(PayloadReadError) {
        let contiguous = Array(bytes)
        var done = 0
        while done < contiguous.count {
            let wrote = contiguous.withUnsafeBytes { buffer in
                pwrite(descriptor, buffer.baseAddress! + done, contiguous.count - done, off_t(offset + done))
            }
            if wrote < 0 {
                if errno == EINTR { continue }
                throw .failed("cannot write", path, errno: errno)
            }
            done += wrote
        }
    }

    package static func == (lhs: PayloadFile, rhs: PayloadFile) -> Bool { lhs === rhs }
    package func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
    package var description: String { path }
}
