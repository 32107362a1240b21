import ArgumentParser
import Foundation
@testable import bletransfer
@testable import Machines
import Roles
@testable import Storage
import Testing
import Transfer

/// `send --file PATH` sends the file's name and modification time unless `--no-name`.
@Suite struct SendFileNameTests {
    static func scratchFile(named name: String) throws -> String {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("send-name-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent(name).path
        try Data("picture".utf8).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.modificationDate: Date(timeIntervalSince1970: 1_600_000_000)], ofItemAtPath: path)
        return path
    }

    static func message(_ arguments: [String]) throws -> (SendCommand, OutgoingMessage) {
        let command = try #require(try BLETransferCommand.parseAsRoot(arguments) as? SendCommand)
        return (command, try command.input.readMessage(limit: 1 << 20, allowEmpty: command.inputOptions.allowEmpty,
                                                       sendsName: !command.inputOptions.noName))
    }

    @Test func fileSendsItsNameAndTime() throws {
        let path = try Self.scratchFile(named: "photo.jpg")
        defer { try? FileManager.default.removeItem(atPath: (path as NSString).deletingLastPathComponent) }
        let (_, named) = try Self.message(["send", "--file", path])
        #expect(named.file?.name == "photo.jpg")
        #expect(named.file?.modificationSeconds == 1_600_000_000)
        #expect(named.payload == Array("picture".utf8))

        let (command, unnamed) = try Self.message(["send", "--file", path, "--no-name"])
        #expect(command.inputOptions.noName)
        #expect(unnamed.file == nil)
        #expect(unnamed.payload == named.payload)
    }

    @Test func argumentsAndNonRegularFilesHaveNoName() throws {
        let (_, argument) = try Self.message(["send", "hello"])
        #expect(argument.file == nil)
        // A character device (like a FIFO or /dev/stdin) has no name worth keeping.
        let (_, device) = try Self.message(["send", "--file", "/dev/null", "--allow-empty"])
        #expect(device.file == nil)
    }
}
