import Foundation
import SystemPackage
import SystemCalls
import Testing

@testable import DaemonSupport

@Suite struct InboxFileNameTests {
    @Test func namesSayWhenAndWhatArrived() {
        let date = Date(timeIntervalSince1970: 1_738_324_805.042)  // 2025-01-31 12:00:05.042 UTC
        #expect(InboxFileName.make(receivedAt: date, sequence: 7, payload: Array("hello\n".utf8))
            == "message-20250131-120005.042-0007.txt")
        #expect(InboxFileName.make(receivedAt: date, sequence: 12345, payload: [0xFF, 0x00])
            == "message-20250131-120005.042-12345.bin")
    }

    @Test(arguments: [
        ("plain text", true), ("tabs\tand\r\nlines\u{0C}", true), ("grüße 🚀", true),
        ("nul\u{0}", false), ("bell\u{7}", false), ("del\u{7F}", false), ("", false),
    ])
    func recognisesText(text: String, isText: Bool) {
        #expect(InboxFileName.looksLikeText(Array(text.utf8)) == isText)
    }

    @Test func invalidUTF8IsNotText() {
        #expect(!InboxFileName.looksLikeText([0x68, 0x69, 0xC3]))  // truncated two-byte sequence
    }
}

@Suite struct PermissionAdviceTests {
    @Test func namesTheGroupThePolicyFileAndTheUser() {
        let line = PermissionAdvice.unauthorized(user: "bletransfer")
        #expect(line.contains("usermod -aG bluetooth bletransfer"))
        #expect(line.contains("/etc/dbus-1/system.d/bluetooth.conf"))
        #expect(line.contains("<allow send_destination=\"org.bluez\"/>"))
        #expect(!line.contains("\n"))
        #expect(PermissionAdvice.unauthorized.contains("usermod -aG bluetooth $USER"))
    }

    @Test func accessDeniedKeepsTheBusMessage() {
        let line = PermissionAdvice.accessDenied(
            call: "RegisterApplication", busMessage: "Rejected send message", user: "alice")
        #expect(line.hasPrefix("RegisterApplication was refused by the D-Bus policy (Rejected send message): add the user"))
        #expect(line.contains("usermod -aG bluetooth alice"))
    }
}

@Suite struct ProcessMemoryTests {
    @Test func residentSizeGrowsWhenMemoryIsTouched() throws {
        let before = try #require(ProcessMemory.residentBytes())
        #expect(before > 0)
        let size = 64 << 20
        let block = UnsafeMutableRawBufferPointer.allocate(byteCount: size, alignment: 4096)
        defer { block.deallocate() }
        // Writing every page makes it resident.
        for offset in stride(from: 0, to: size, by: 4096) { block[offset] = 1 }
        let after = try #require(ProcessMemory.residentBytes())
        #expect(after - before >= size / 2)
    }
}

@Suite struct DirectoryEntryTests {
    @Test func listsNamesAndTypesWithoutDots() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("entries-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root + "/folder", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: root) }
        try Data("x".utf8).write(to: URL(fileURLWithPath: root + "/file.txt"))
        let entries = try DirectoryEntry.list(root).sorted { $0.name < $1.name }
        #expect(entries.map(\.name) == ["file.txt", "folder"])
        #expect(entries.map(\.mayBeDirectory) == [false, true])
    }

    @Test func aMissingDirectoryIsItsErrno() {
        #expect(throws: Errno.noSuchFileOrDirectory) { try DirectoryEntry.list("/nonexistent-\(UUID().uuidString)") }
    }
}

extension PermissionAdvice {
    /// One line for the `unauthorized` state, when the user is not known.
    static let unauthorized = unauthorized(user: nil)

    /// One line for a D-Bus `AccessDenied` error on a given call, keeping the bus's own words.
    static func accessDenied(call: String, busMessage: String?, user: String?) -> String {
        var line = "\(call) was refused by the D-Bus policy"
        if let busMessage, !busMessage.isEmpty { line += " (\(busMessage))" }
        return line + ": " + remedy(user: user)
    }
}
