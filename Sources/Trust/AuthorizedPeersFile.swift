import Foundation

/// An authorized-peers file's text as `bletransfer peers` edits it: every line kept as it is (even
/// malformed ones), key lines added at the end, removed or renamed in place. Pure.
package struct AuthorizedPeersFile: Sendable, Equatable {
    package struct Entry: Sendable, Equatable {
        /// 1-based line number.
        package var line: Int
        package var key: PeerKey
        package var name: String?
    }

    /// Why an edit was refused; each description is one line naming what was given.
    package enum EditError: Error, Sendable, Equatable, CustomStringConvertible {
        /// The line given to add is not a public key line.
        case malformedLine(String, reason: String)
        /// The key given to add is already listed, at `line`.
        case alreadyListed(String, line: Int)
        /// No key line has this name or fingerprint.
        case noMatch(String)
        /// Several key lines have this name (their line numbers).
        case ambiguous(String, lines: [Int])
        /// A new name that is empty or not one line of printable text.
        case invalidName(String)
        /// A new name another line carries, as names compare (NFC, and as folder names), at `line`.
        case nameTaken(String, line: Int)

        package var description: String {
            switch self {
            case .malformedLine(let line, let reason):
                return "'\(line.prefix(80))' is not a public key line: \(reason)"
            case .alreadyListed(let line, let number):
                return "'\(line.prefix(80))': this key is already listed, at line \(number)"
            case .noMatch(let given):
                return "no peer named '\(given)' or with that fingerprint"
            case .ambiguous(let given, let lines):
                return "several peers are named '\(given)' (lines \(lines.map(String.init).joined(separator: ", "))); "
                    + "give the fingerprint instead"
            case .invalidName(let name):
                if AuthorizedPeersFile.looksLikeFingerprint(name) {
                    return "'\(name.prefix(80))' is not a name: a name must not start with SHA256: (it would read as a fingerprint)"
                }
                return "'\(name.prefix(80))' is not a name: give one word or line of printable text"
            case .nameTaken(let name, let line):
                return "the name '\(name.prefix(80))' is taken, at line \(line) (names must differ as folder names too); give another"
            }
        }
    }

    /// The lines, without their line breaks.
    package private(set) var lines: [String]

    package init(text: String) {
        var split = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" }).map(String.init)
        // A final line break ends the last line rather than starting an empty one.
        if split.last == "" { split.removeLast() }
        lines = split
    }

    /// The file's text: each line ended by a line break.
    package var text: String {
        lines.map { $0 + "\n" }.joined()
    }

    /// The well-formed key lines; comments, blank and malformed lines are left out.
    package var entries: [Entry] {
        lines.enumerated().compactMap { index, line in
            guard let (key, name) = Self.parse(line) else { return nil }
            return Entry(line: index + 1, key: key, name: name)
        }
    }

    private static func parse(_ line: String) -> (PeerKey, String?)? {
        let trimmed = line.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
        if trimmed.isEmpty || trimmed.hasPrefix("#") { return nil }
        return try? PeerKey.parseLine(Substring(trimmed))
    }

    /// Parses a line given to add: a public key line, surrounding white space ignored.
    package static func parseGiven(_ line: String) throws(EditError) -> (key: PeerKey, name: String?) {
        let trimmed = line.trimmingCharacters(in: .whitespaces.union(CharacterSet(charactersIn: "\r")))
        let parsed: (key: PeerKey, name: String?)
        do {
            parsed = try PeerKey.parseLine(Substring(trimmed))
        } catch {
            if case .malformedKey(let reason) = error { throw .malformedLine(trimmed, reason: reason) }
            throw .malformedLine(trimmed, reason: error.description)
        }
        if let name = parsed.name, !isValidName(name) { throw .invalidName(name) }
        return parsed
    }

    /// Names compare by NFC, then `form` (the CLI's folder form on disk: no two peers share an outbox or inbox).
    package typealias NameForm = @Sendable (String) -> String

    package static let nfc: NameForm = { $0.precomposedStringWithCanonicalMapping }

    /// The entry other than `except` whose name compares equal to `name`.
    private func entry(named name: String, by form: NameForm, except: Int? = nil) -> Entry? {
        let wanted = form(Self.nfc(name))
        return entries.first { entry in entry.line != except && entry.name.map { form(Self.nfc($0)) } == wanted }
    }

    /// Appends a public key line (as `PeerKey.line(name:)` writes it). Refuses a malformed line, a
    /// listed key, or a name another line carries (compared by `form`).
    @discardableResult
    package mutating func add(_ line: String, form: NameForm = AuthorizedPeersFile.nfc) throws(EditError) -> Entry {
        let (key, name) = try Self.parseGiven(line)
        if let listed = entries.first(where: { $0.key == key }) {
            throw .alreadyListed(line.trimmingCharacters(in: .whitespaces), line: listed.line)
        }
        if let name, let taken = entry(named: name, by: form) { throw .nameTaken(name, line: taken.line) }
        lines.append(key.line(name: name))
        return Entry(line: lines.count, key: key, name: name)
    }

    /// The entry `given` names: a fingerprint (short or full) or a name (by `form`); a name on two lines is refused.
    package func entry(matching given: String, form: NameForm = AuthorizedPeersFile.nfc) throws(EditError) -> Entry {
        let all = entries
        if let byFingerprint = all.first(where: { $0.key.hasFingerprint(given) }) { return byFingerprint }
        let wanted = form(Self.nfc(given))
        let named = all.filter { $0.name.map { form(Self.nfc($0)) } == wanted }
        guard let first = named.first else { throw .noMatch(given) }
        guard named.count == 1 else { throw .ambiguous(given, lines: named.map(\.line)) }
        return first
    }

    /// Removes the key line `given` names; other lines stay as they are.
    @discardableResult
    package mutating func remove(_ given: String, form: NameForm = AuthorizedPeersFile.nfc) throws(EditError) -> Entry {
        let entry = try entry(matching: given, form: form)
        lines.remove(at: entry.line - 1)
        return entry
    }

    /// Renames the key line `given` names to `newName` (NFC), in place; refuses a name another line has (by `form`).
    @discardableResult
    package mutating func rename(_ given: String, to newName: String, form: NameForm = AuthorizedPeersFile.nfc)
        throws(EditError) -> Entry {
        guard Self.isValidName(newName) else { throw .invalidName(newName) }
        let name = Self.nfc(newName)
        var entry = try entry(matching: given, form: form)
        if let taken = self.entry(named: name, by: form, except: entry.line) { throw .nameTaken(name, line: taken.line) }
        entry.name = name
        lines[entry.line - 1] = entry.key.line(name: name)
        return entry
    }

    /// What a key line's name can hold and read back the same: one line of printable text, not
    /// starting or ending with white space, not starting with `SHA256:` (it would read as a fingerprint).
    package static func isValidName(_ name: String) -> Bool {
        !name.isEmpty && name == name.trimmingCharacters(in: .whitespaces) && !looksLikeFingerprint(name)
            && !name.unicodeScalars.contains(where: { $0.properties.generalCategory == .control
                || $0.properties.generalCategory == .format || $0 == "\u{2028}" || $0 == "\u{2029}" })
    }

    static func looksLikeFingerprint(_ name: String) -> Bool {
        name.uppercased().hasPrefix("SHA256:")
    }
}
