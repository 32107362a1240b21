import Crypto
import Foundation

/// A host's public Curve25519 key as people exchange it: `bletransfer-x25519 <base64 of 32 bytes>
/// [name]`, as SSH writes public keys, pasted into a peer's authorized-peers file as it is.
package struct PeerKey: Sendable, Hashable, CustomStringConvertible {
    package static let lineType = "bletransfer-x25519"
    package static let rawLength = 32

    package let rawBytes: [UInt8]

    package init(rawBytes: [UInt8]) throws(TrustError) {
        guard rawBytes.count == Self.rawLength else {
            throw .malformedKey("a public key is \(Self.rawLength) bytes, this one \(rawBytes.count)")
        }
        self.rawBytes = rawBytes
    }

    package init(_ key: Curve25519.KeyAgreement.PublicKey) {
        rawBytes = Array(key.rawRepresentation)
    }

    package var publicKey: Curve25519.KeyAgreement.PublicKey {
        // 32 bytes were checked on the way in; X25519 accepts any 32-byte string as a point.
        try! Curve25519.KeyAgreement.PublicKey(rawRepresentation: rawBytes)
    }

    package var base64: String { Data(rawBytes).base64EncodedString() }

    /// `SHA256:` and the key's whole SHA-256 in unpadded base64 (43 characters), as OpenSSH shows
    /// fingerprints: compared in full, no second key can be made to match it.
    package var fingerprint: String {
        var encoded = Data(SHA256.hash(data: rawBytes)).base64EncodedString()
        while encoded.hasSuffix("=") { encoded.removeLast() }
        return "SHA256:" + encoded
    }

    /// Whether `text` is this key's fingerprint, with or without `SHA256:`.
    package func hasFingerprint(_ text: String) -> Bool {
        let given = text.hasPrefix("SHA256:") ? String(text.dropFirst(7)) : text
        return !given.isEmpty && given == String(fingerprint.dropFirst(7))
    }

    /// The public key line, with `name` after the key when there is one.
    package func line(name: String? = nil) -> String {
        let base = "\(Self.lineType) \(base64)"
        guard let name, !name.isEmpty else { return base }
        return base + " " + name
    }

    package var description: String { fingerprint }

    /// Parses `bletransfer-x25519 <base64> [name …]`; the name is the rest of the line, trimmed.
    package static func parseLine(_ line: Substring) throws(TrustError) -> (key: PeerKey, name: String?) {
        let fields = line.split(maxSplits: 2, omittingEmptySubsequences: true, whereSeparator: { $0 == " " || $0 == "\t" })
        guard let type = fields.first else { throw .malformedKey("empty line") }
        guard type == lineType else {
            throw .malformedKey("expected '\(lineType)' at the start, found '\(type.prefix(40))'")
        }
        guard fields.count >= 2 else { throw .malformedKey("'\(lineType)' without a key after it") }
        guard let data = Data(base64Encoded: String(fields[1])) else {
            throw .malformedKey("the key is not base64")
        }
        let key = try PeerKey(rawBytes: Array(data))
        // NFC: one spelling for a name that looks the same ("é" composed or not): names compare as read.
        let name = fields.count > 2 ? fields[2].trimmingCharacters(in: .whitespaces).precomposedStringWithCanonicalMapping : nil
        return (key, name?.isEmpty == true ? nil : name)
    }
}
