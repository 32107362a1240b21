import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A host's Curve25519 key pair, the static key of its Noise handshakes.
///
/// File format (text, mode 0600, written by ``create(at:name:replacing:)``):
///
/// ```
/// # bletransfer identity: the private key of this host. Keep it readable by its owner only.
/// # Its public key line: bletransfer-x25519 <base64> <name>
/// bletransfer-x25519-private <base64 of the 32-byte private key> [name]
/// ```
///
/// `#` lines and blank lines are ignored; exactly one `bletransfer-x25519-private` line. The public
/// key is derived from the private one, never stored alone.
package struct HostIdentity: Sendable {
    package static let privateLineType = "bletransfer-x25519-private"

    /// The private key's 32 raw bytes: Crypto's key types are not Sendable, plain bytes are.
    package let privateKeyBytes: [UInt8]
    /// The name written after the key (by default `user@host`), shown in the public key line.
    package let name: String?

    package init(privateKey: Curve25519.KeyAgreement.PrivateKey = .init(), name: String? = nil) {
        self.privateKeyBytes = Array(privateKey.rawRepresentation)
        // The name ends a line of the file and of the public key line: one line, trimmed.
        let oneLine = name?.split(whereSeparator: \.isNewline).joined(separator: " ").trimmingCharacters(in: .whitespaces)
        self.name = oneLine?.isEmpty == false ? oneLine : nil
    }

    package var privateKey: Curve25519.KeyAgreement.PrivateKey {
        // The bytes came from a valid key; X25519 accepts any 32 bytes as a private key.
        try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: privateKeyBytes)
    }

    package var publicKey: PeerKey { PeerKey(privateKey.publicKey) }
    /// What `bletransfer id` prints and peers paste into their authorized-peers file.
    package var publicKeyLine: String { publicKey.line(name: name) }

    package var fileContents: String {
        var text = "# bletransfer identity: the private key of this host. Keep it readable by its owner only.\n"
        text += "# Its public key line: \(publicKeyLine)\n"
        text += Self.privateLineType + " " + Data(privateKeyBytes).base64EncodedString()
        if let name, !name.isEmpty { text += " " + name }
        return text + "\n"
    }

    /// Parses a file's text; `path` only names the file in errors.
    package init(parsing text: String, path: String) throws(TrustError) {
        var found: (key: Curve25519.KeyAgreement.PrivateKey, name: String?)?
        for (index, rawLine) in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated() {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            let number = index + 1
            let fields = line.split(maxSplits: 2, whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.first == Substring(Self.privateLineType) else {
                throw .malformedIdentity(
                    path: path, line: number, reason: "expected '\(Self.privateLineType) <base64 key>'")
            }
            guard found == nil else {
                throw .malformedIdentity(path: path, line: number, reason: "a second private key; keep one per file")
            }
            guard fields.count >= 2, let data = Data(base64Encoded: String(fields[1])), data.count == 32,
                let key = try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: data)
            else {
                throw .malformedIdentity(path: path, line: number, reason: "the private key is not 32 bytes of base64")
            }
            let name = fields.count > 2 ? fields[2].trimmingCharacters(in: .whitespaces) : nil
            found = (key, name?.isEmpty == true ? nil : name)
        }
        guard let found else {
            throw .malformedIdentity(path: path, line: 0, reason: "no '\(Self.privateLineType)' line")
        }
        self.init(privateKey: found.key, name: found.name)
    }

    /// Reads the identity at `path`; refuses a file group or others can read, as ssh does (its key may be known).
    package static func load(from path: String) throws(TrustError) -> HostIdentity {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            let error = errno
            if error == ENOENT { throw .identityMissing(path: path) }
            throw .fileAccess(path: path, operation: "read", errno: error)
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0 else { throw .fileAccess(path: path, operation: "read", errno: errno) }
        let mode = UInt32(status.st_mode)
        guard mode & UInt32(S_IFMT) == UInt32(S_IFREG) else {
            throw .malformedIdentity(path: path, line: 0, reason: mode & UInt32(S_IFMT) == UInt32(S_IFDIR)
                ? "is a directory, not a file; give the identity file's path" : "is not a regular file")
        }
        guard mode & 0o077 == 0 else { throw .identityTooOpen(path: path, mode: mode) }
        // An identity file is a few hundred bytes; anything over 64 KiB is not one.
        guard let bytes = try TrustFileReader.readAll(descriptor, path: path, limit: 65536) else {
            throw .malformedIdentity(path: path, line: 0, reason: "over 64 KiB, not an identity file")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw .malformedIdentity(path: path, line: 0, reason: "not UTF-8 text")
        }
        return try HostIdentity(parsing: text, path: path)
    }

    /// `mkdir -p`, mode 0700 for the directories it creates, reporting the failed step's errno.
    static func makeDirectories(_ path: String) throws(TrustError) {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, 0o700) != 0 && errno != EEXIST {
                throw .fileAccess(path: current, operation: "create the directory", errno: errno)
            }
        }
    }

    /// Writes a new identity to `path` atomically, mode 0600: to a temporary file created 0600 in
    /// the same directory (never readable by others, not even briefly), flushed, then linked to
    /// `path` (fails if something is there) or, `replacing`, renamed over it. Parents get mode 0700.
    package func write(to path: String, replacing: Bool) throws(TrustError) {
        let directory = (path as NSString).deletingLastPathComponent
        let parent = directory.isEmpty ? "." : directory
        try Self.makeDirectories(parent)
        if !replacing && FileManager.default.fileExists(atPath: path) { throw .identityExists(path: path) }

        let temporary = try AtomicFile.writeTemporary(in: parent, prefix: ".identity", contents: fileContents,
                                                      mode: 0o600, for: path)
        var finished = false
        defer { if !finished { unlink(temporary) } }
        if replacing {
            guard rename(temporary, path) == 0 else { throw .fileAccess(path: path, operation: "write", errno: errno) }
        } else {
            guard link(temporary, path) == 0 else {
                let error = errno
                if error == EEXIST { throw .identityExists(path: path) }
                throw .fileAccess(path: path, operation: "write", errno: error)
            }
            unlink(temporary)
        }
        finished = true
    }
}
