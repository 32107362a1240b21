import DaemonSupport
import Foundation
@testable import Machines
import PropertyBased
@testable import Roles
@testable import Storage
import SystemPackage
import Testing
import Transfer

#if canImport(Glibc)
import Glibc
#endif

/// How a received message's file name becomes a file in the output directory: sanitized into
/// one safe path component, never overwriting, with the sender's modification time.
struct ReceivedFileNameTests {
    /// What every stored name must be, whatever the sender sent.
    static func isSafeComponent(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        return !bytes.isEmpty && bytes.count <= 255 && bytes.first != UInt8(ascii: ".")
            && !bytes.contains(UInt8(ascii: "/")) && !bytes.contains(0)
            && !name.unicodeScalars.contains { SafeText.needsEscape($0) }
            && !name.hasPrefix(OutputDirectory.partialPrefix)
            && !name.hasPrefix("-") && !name.unicodeScalars.contains { OutputDirectory.isInvisible($0) }
            && name == name.precomposedStringWithCanonicalMapping
    }

    /// Scalars that hostile names are made of, mixed with ordinary and multi-byte ones.
    static let pieces: [String] = [
        "a", "Z", "0", " ", ".", "..", "/", "\0", "\u{1B}", "[2J", "\n", "\t", "\r", "\u{7F}", "\u{9B}",
        "\u{202E}", "\u{2066}", "\u{200F}", "\u{2028}", "\u{2029}", "é", "e\u{301}", "ß", "日本", "🐱", "👩‍👩‍👧",
        ".jpg", ".tar.gz", "-", "_", "~", ".bletransfer-partial-", "\u{FEFF}", "\u{10FFFF}",
    ]

    @Test func anyNameBecomesOneSafeComponentOrNothing() async {
        await propertyCheck(count: 500, input: Gen.int(in: 0...(Self.pieces.count - 1)).array(of: 0...120),
                            Gen.int(in: 0...4)) { indices, repeats in
            // Repeating the pieces pushes names past 255 bytes often enough.
            let name = String(repeating: indices.map { Self.pieces[$0] }.joined(), count: repeats + 1)
            guard let safe = OutputDirectory.sanitizedFileName(name) else {
                // Nothing usable: only dots (and nothing else) were sent.
                #expect(name.unicodeScalars.allSatisfy { $0 == "." })
                return
            }
            #expect(Self.isSafeComponent(safe), "\(name.debugDescription) → \(safe.debugDescription)")
            #expect(OutputDirectory.sanitizedFileName(safe) == safe, "sanitizing twice changes \(safe.debugDescription)")
            for number in [1, 9, 10_000] {
                let numbered = OutputDirectory.numbered(safe, number)
                #expect(Self.isSafeComponent(numbered) && numbered != safe, "\(numbered.debugDescription)")
            }
        }
    }

    @Test func safeNamesAreKeptAsTheyAre() async {
        let safePieces = ["photo", "a", "Z9", " ", "é", "日本", "🐱", "-", "_", "(1)", ".jpg", "."]
        await propertyCheck(count: 300, input: Gen.int(in: 0...(safePieces.count - 1)).array(of: 1...40)) { indices in
            let name = "x" + indices.map { safePieces[$0] }.joined()
            guard name.utf8.count <= 255 else { return }
            #expect(OutputDirectory.sanitizedFileName(name) == name)
        }
    }

    @Test("hostile names", arguments: [
        ("../../etc/passwd", "_.._etc_passwd"),
        ("\u{1B}[2J", "_[2J"),
        (".bashrc", "bashrc"),
        ("a\u{202E}gpj.exe", "a_gpj.exe"),
        ("..", nil),
        (".", nil),
        ("", nil),
        (".bletransfer-partial-1234", "bletransfer-partial-1234"),
        ("line\u{2028}break\nname.txt", "line_break_name.txt"),
        (".\u{301}hidden", "\u{301}hidden"),
        ("-rf", "_rf"),
        ("--help.txt", "_-help.txt"),
        ("a\u{200B}b.txt", "a_b.txt"),
        ("\u{FEFF}bom.txt", "_bom.txt"),
        ("soft\u{00AD}hyphen", "soft_hyphen"),
        ("cafe\u{301}.txt", "caf\u{E9}.txt"),
    ] as [(String, String?)])
    func hostileName(name: String, expected: String?) {
        #expect(OutputDirectory.sanitizedFileName(name) == expected)
    }

    @Test func longNamesAreCutAtACharacterBoundaryKeepingTheExtension() throws {
        let accents = String(repeating: "é", count: 300)           // 600 bytes
        let cut = try #require(OutputDirectory.sanitizedFileName(accents))
        #expect(cut.utf8.count == 254)                               // 127 × 2 bytes: never half an é
        #expect(cut == String(repeating: "é", count: 127))

        let photo = try #require(OutputDirectory.sanitizedFileName(accents + ".jpg"))
        #expect(photo.hasSuffix(".jpg") && photo.utf8.count <= 255)
        #expect(photo == String(repeating: "é", count: 125) + ".jpg")

        let numbered = OutputDirectory.numbered(photo, 12)
        #expect(numbered.hasSuffix("-12.jpg") && numbered.utf8.count <= 255)
    }

    @Test func takenNamesAreNumberedBeforeTheExtension() {
        #expect(OutputDirectory.numbered("photo.jpg", 1) == "photo-1.jpg")
        #expect(OutputDirectory.numbered("notes", 2) == "notes-2")
        #expect(OutputDirectory.numbered("archive.tar.gz", 1) == "archive.tar-1.gz")
    }

    static func temporaryDirectory() throws -> FilePath {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("names-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return FilePath(path)
    }

    static func named(_ payload: String, _ name: String, seconds: Int64 = 1_600_000_000,
                      nanoseconds: UInt32 = 123_456_789) -> ReceivedMessage {
        var message = ReceivedMessage(payload: Array(payload.utf8), format: .secure)
        message.file = SentFileAttributes(name: name, modificationSeconds: seconds, modificationNanoseconds: nanoseconds)
        return message
    }

    static func modificationTime(_ path: String) -> timespec {
        var status = stat()
        _ = stat(path, &status)
        return status.st_mtim
    }

    @Test func twoMessagesWithTheSameNameBecomeTwoFiles() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }
        let sink = try OutputDirectorySink(path: directory)
        let first = try #require(try await sink.store(Self.named("one", "photo.jpg"), sequence: 1, from: nil))
        let second = try #require(try await sink.store(Self.named("two", "photo.jpg"), sequence: 2, from: nil))
        #expect(first == directory.appending("photo.jpg").string)
        #expect(second == directory.appending("photo-1.jpg").string)
        #expect(FileManager.default.contents(atPath: first) == Data("one".utf8))
        #expect(FileManager.default.contents(atPath: second) == Data("two".utf8))
        let time = Self.modificationTime(first)
        #expect(time.tv_sec == 1_600_000_000 && time.tv_nsec == 123_456_789)
    }

    @Test func hostileNamesStayInsideTheDirectory() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }
        let sink = try OutputDirectorySink(path: directory)
        for name in ["../../etc/passwd", ".bashrc", "\u{1B}[2J", "..", String(repeating: "é", count: 300)] {
            let stored = try #require(try await sink.store(Self.named("x", name), sequence: 1, from: nil))
            // A path is a tree's file: its directories are made inside this one, never above.
            #expect(stored.hasPrefix(directory.string + "/") && !stored.contains("/../"), "\(stored)")
            for component in FilePath(String(stored.dropFirst(directory.string.count + 1))).components {
                #expect(Self.isSafeComponent(component.string), "\(stored)")
            }
        }
        #expect(FileManager.default.fileExists(atPath: directory.string + "/etc/passwd"))
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.string)
        #expect(names.count == 5)
        // ".." had nothing usable: it got a generated name.
        #expect(names.contains { $0.hasPrefix("message-") })
    }

    @Test func aModificationTimeOutOfRangeIsNotApplied() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }
        let sink = try OutputDirectorySink(path: directory)
        let before = Int(Date().timeIntervalSince1970) - 5
        for seconds in [Int64.min, -1, Int64(Date().timeIntervalSince1970) + 10 * 86_400, Int64.max] {
            let stored = try #require(try await sink.store(Self.named("t", "t.txt", seconds: seconds), sequence: 1, from: nil))
            #expect(Self.modificationTime(stored).tv_sec >= before, "\(seconds)")
        }
        #expect(OutputDirectory.acceptedModificationTime(seconds: 0, nanoseconds: 0) != nil)
    }

    @Test func aNameTheFileSystemRefusesGivesWayToTheGeneratedOne() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }
        // A file system taking names of at most 24 bytes stands for eCryptfs (143).
        let narrow = try OutputDirectory(path: directory, nameLimit: 24)
        let long = String(repeating: "n", count: 40) + ".txt"
        let stored = try await narrow.store(Self.named("kept all the same", long), generatedName: "message-1.txt")
        #expect(stored.lastComponent?.string == "message-1.txt")
        #expect(FileManager.default.contents(atPath: stored.string) == Data("kept all the same".utf8))
        // A name that fits is still used as sent.
        let short = try await narrow.store(Self.named("short", "short.txt"), generatedName: "message-2.txt")
        #expect(short.lastComponent?.string == "short.txt")
        // Without a sent name there is nothing to fall back to: the refusal is the error.
        await #expect(throws: OutputDirectoryError.self) {
            try await narrow.store(Array("x".utf8), baseName: long)
        }
        #expect(OutputDirectory.refusesName(.fileNameTooLong) && OutputDirectory.refusesName(.illegalByteSequence))
        #expect(!OutputDirectory.refusesName(.noSpace))
    }

    @Test func aMessageADirectorySinkCannotStoreIsRefusedNotFatal() async throws {
        let directory = try Self.temporaryDirectory()
        let sink = try OutputDirectorySink(path: directory)
        try FileManager.default.removeItem(atPath: directory.string)   // the disk went away under it
        await #expect(throws: MessageRefused.self) {
            try await sink.store(Self.named("lost", "lost.txt"), sequence: 1, from: nil)
        }
    }

    @Test func messagesWithoutANameKeepGeneratedNames() async throws {
        let directory = try Self.temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory.string) }
        let sink = try OutputDirectorySink(path: directory)
        let stored = try #require(try await sink.store(ReceivedMessage(payload: Array("hi".utf8), format: .secure),
                                                      sequence: 3, from: nil))
        let name = FilePath(stored).lastComponent?.string ?? ""
        #expect(name.hasPrefix("message-") && name.hasSuffix("-3.txt"))
    }
}
