import Crypto
import Foundation

@testable import Trust

extension Array where Element == UInt8 {
    init(hex: String) {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        self = bytes
    }

    var hex: String { map { String(format: "%02x", $0) }.joined() }
}

func privateKey(_ bytes: [UInt8]) -> Curve25519.KeyAgreement.PrivateKey {
    try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: bytes)
}

/// A fresh directory under the system's temporary directory, removed by the caller.
func temporaryDirectory() throws -> String {
    let path = NSTemporaryDirectory() + "trust-tests-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Runs a complete XX handshake between two fresh parties and returns both sides' record ciphers.
func handshakePair(
    initiator: HostIdentity = HostIdentity(), responder: HostIdentity = HostIdentity(), prologue: [UInt8] = [],
    rekeyInterval: UInt64 = RecordSealer.defaultRekeyInterval
) throws -> (initiator: (sealer: RecordSealer, opener: RecordOpener), responder: (sealer: RecordSealer, opener: RecordOpener)) {
    var first = NoiseXXHandshake(role: .initiator, staticKey: initiator.privateKey, prologue: prologue)
    var second = NoiseXXHandshake(role: .responder, staticKey: responder.privateKey, prologue: prologue)
    _ = try second.readMessage(try first.writeMessage())
    _ = try first.readMessage(try second.writeMessage())
    _ = try second.readMessage(try first.writeMessage())
    return (
        try first.transportKeys(rekeyInterval: rekeyInterval), try second.transportKeys(rekeyInterval: rekeyInterval)
    )
}

/// Two completed handshakes (initiator, responder) between fresh identities.
func completedHandshakes(prologue: [UInt8] = []) throws -> (NoiseXXHandshake, NoiseXXHandshake) {
    var first = NoiseXXHandshake(role: .initiator, staticKey: .init(), prologue: prologue)
    var second = NoiseXXHandshake(role: .responder, staticKey: .init(), prologue: prologue)
    _ = try second.readMessage(try first.writeMessage())
    _ = try first.readMessage(try second.writeMessage())
    _ = try second.readMessage(try first.writeMessage())
    return (first, second)
}
