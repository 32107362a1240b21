import Foundation

/// The `bletransfer` executable that `swift test` builds beside the test bundle, run to its exit.
///
/// Input and output go through files, not pipes: a pipe's write end is inherited by any process
/// another test spawns at the same moment (a private bus's dbus-daemon), so reading a pipe to its
/// end of file would wait for that process too, and a blocking wait on the test runner's small
/// cooperative pool can stall every test.
package enum BuiltTool {
    package struct Result: Sendable {
        package var status: Int32
        package var out: String
        package var err: String
    }

    package static var executable: URL {
        get throws { try executable(named: "bletransfer") }
    }

    /// Another executable of the package, built beside the test bundle too.
    package static func executable(named name: String) throws -> URL {
        let test = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        return URL(fileURLWithPath: test).deletingLastPathComponent().appendingPathComponent(name)
    }

    /// Runs the tool (or the executable `named`) with `arguments`, `input` on its standard
    /// input, and `environment` (this process's when nil, with `extraEnvironment` merged over it).
    /// `terminal`: its follower is standard input instead of `input` (a person at a terminal).
    package static func run(_ arguments: [String], named name: String = "bletransfer", input: String = "",
                            environment: [String: String]? = nil, extraEnvironment: [String: String] = [:],
                            terminal: PseudoTerminal? = nil) throws -> Result {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("bletransfer-tool-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: scratch) }
        let inURL = scratch.appendingPathComponent("in")
        let outURL = scratch.appendingPathComponent("out"), errURL = scratch.appendingPathComponent("err")
        try Data(input.utf8).write(to: inURL)
        _ = FileManager.default.createFile(atPath: outURL.path, contents: nil)
        _ = FileManager.default.createFile(atPath: errURL.path, contents: nil)
        let inHandle = try FileHandle(forReadingFrom: inURL)
        let out = try FileHandle(forWritingTo: outURL), err = try FileHandle(forWritingTo: errURL)
        defer { try? inHandle.close(); try? out.close(); try? err.close() }

        let process = Process()
        process.executableURL = try executable(named: name)
        process.arguments = arguments
        if environment != nil || !extraEnvironment.isEmpty {
            process.environment = (environment ?? ProcessInfo.processInfo.environment).merging(extraEnvironment) { _, new in new }
        }
        process.standardInput = terminal.map { FileHandle(fileDescriptor: $0.follower, closeOnDealloc: false) } ?? inHandle
        process.standardOutput = out
        process.standardError = err
        try process.run()
        process.waitUntilExit()
        let outData = try Data(contentsOf: outURL), errData = try Data(contentsOf: errURL)
        return Result(status: process.terminationStatus, out: String(decoding: outData, as: UTF8.self),
                      err: String(decoding: errData, as: UTF8.self))
    }
}
