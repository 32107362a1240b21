import Foundation
import Testing

/// README.md as a new user reads it (issue 48, the first hour): the two commands of a checkout
/// near the top and exactly as the tooling runs them, then install, the quick start with
/// `status` first, and what `status`, `-q` and the completions do.
@Suite struct ReadmeTests {
    static var readme: String {
        get throws {
            let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().appendingPathComponent("README.md")
            return try String(contentsOf: url, encoding: .utf8)
        }
    }

    @Test func theTwoCommandsStayNearTheTopAsTheyAre() throws {
        let lines = try Self.readme.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let demo = "bash scripts/demo.sh     # main job: a real `send` → `receive` (in the two-host virtual BLE lab when this machine has no adapter)"
        let tests = "bash scripts/test.sh     # the tests: unit, property and bus tests, bounded fuzzing, service install checks, the two-host lab scenarios"
        let demoLine = try #require(lines.firstIndex(of: demo))
        #expect(lines.firstIndex(of: tests) == demoLine + 1)
        #expect(demoLine < 20, "near the top")
    }

    @Test func installThenAQuickStartThatBeginsWithStatus() throws {
        let text = try Self.readme
        let install = try #require(text.range(of: "## Install"))
        let quick = try #require(text.range(of: "## Quick start"))
        #expect(install.lowerBound < quick.lowerBound)
        #expect(text.contains(".build-deb/dist/bletransfer_"), "where the .deb lands")
        let afterQuick = text[quick.upperBound...]
        let status = try #require(afterQuick.range(of: "bletransfer status"))
        let send = try #require(afterQuick.range(of: "bletransfer send"))
        #expect(status.lowerBound < send.lowerBound, "status comes first")
        #expect(text.contains("names the problem in its **first** line"))
        #expect(!text.contains("in its last line"))
        #expect(text.contains("`-q`") && text.contains("completions"))
        #expect(!text.contains("echo y"))
    }
}
