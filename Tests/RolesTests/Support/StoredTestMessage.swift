import Foundation
@testable import Storage
import SystemPackage
import Transfer

/// A message as a receiver has it once stored and before its journal hears of it: `text`'s
/// bytes stored in `inbox` under `name`, the digest the journal keys it by (hex), and the path
/// it landed at.
func storeTestMessage(_ text: String, in inbox: String, as name: String) async throws
    -> (payload: [UInt8], digest: String, path: String) {
    let payload = Array(text.utf8)
    let path = try await OutputDirectory(path: FilePath(inbox)).store(payload, baseName: name).string
    return (payload, lowercaseHex(sha256(payload)), path)
}
