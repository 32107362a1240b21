import Foundation
import Trust

/// An `authorized-peers` file in a fresh directory, first holding `contents` with `mode`, for
/// `body` to read and rewrite at `path`; the directory is removed after it.
func withScratchPeersFile(_ contents: String, mode: mode_t, _ body: (_ path: String) throws -> Void) throws {
    let directory = NSTemporaryDirectory() + "reload-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: directory) }
    let path = directory + "/authorized-peers"
    try AtomicFile.replace(path: path, contents: contents, mode: mode)
    try body(path)
}
