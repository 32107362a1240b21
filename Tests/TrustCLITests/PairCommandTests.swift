import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `bletransfer pair` before Bluetooth: what it refuses and what it prepares. The pairing itself
/// is PairingExchangeTests (pure) and the lab's `peers-pair` (two hosts).
@Suite struct PairCommandTests {
    private func temporaryDirectory() throws -> String {
        let path = NSTemporaryDirectory() + "pair-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func serviceFilesAndExplicitFilesAreNotCombined() throws {
        let result = try runTool(["pair", "--service", "--identity", "/tmp/x"])
        #expect(result.status == 64)
        #expect(result.err.contains("--service chooses the files"))
    }

    @Test func aTimeoutThatIsNotADurationIsRefused() throws {
        let result = try runTool(["pair", "--timeout", "soon"])
        #expect(result.status == 64)
    }

    /// A list the roles would refuse is refused before anyone compares codes; a host without an
    /// identity gets one first (0600).
    @Test func aGroupWritableListIsRefusedBeforeBluetoothAndTheIdentityIsMade() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let identity = directory + "/identity"
        let peers = directory + "/authorized-peers"
        try "# nobody yet\n".write(toFile: peers, atomically: true, encoding: .utf8)
        #expect(chmod(peers, 0o666) == 0)
        let result = try runTool(["pair", "--identity", identity, "--authorized-peers", peers, "--timeout", "1"])
        #expect(result.status == 78)
        #expect(result.err.contains("chmod go-w"))
        var status = stat()
        #expect(stat(identity, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
    }
}
