// libFuzzer entry point over everything a peer or a local file controls in the Trust core: Noise
// XX handshake messages in both roles, the frame reader and record opener, and the text of
// authorized-peers and identity files. Built together with Sources/Trust/*.swift into one module
// by scripts/fuzz/trust/fuzz-trust.sh, so it reaches internal API without `import Trust`.
//
// Input layout: byte 0 selects what the rest is:
//   0: a message-2 for an initiator that wrote message 1 (arbitrary bytes, one message)
//   1: a message-1 then a message-3 for a responder (2-byte big-endian length, then bytes; rest)
//   2: edits applied to a genuine handshake transcript: each edit is message (1 byte, mod 3),
//      offset (2 bytes), xor (1 byte), truncate (1 byte: 0 keeps the length, else cut that many)
//   3: edits (as in 2, message = record index) applied to a genuine stream of sealed records,
//      which is then fed to a frame reader in pieces of 1…64 bytes
//   4: text of an authorized-peers file, an identity file and one public key line
//   5: notification values for a SecureReceiverSession; byte 1 even: arbitrary values, odd:
//      a genuine sender's values with edits (as in 2, message = value index) and swaps
//   6: writes for a SecureSenderSession; byte 1 even: while it waits for message 2, odd: after
//      a genuine handshake and message, while it waits for the ACK
//   7: notification values for a keyless SecureReceiverSession (a central with a run key that
//      lets in any sender's key, offering secure, multi, meta, resume, pipeline and window; with
//      bit 7 of byte 1 set, over an L2CAP channel: `channel` offered too, values in order only),
//      the prefix in front answering without `secure` (the retired plain mode, refused) or with
//      it; every message it completes is acknowledged at once, and must match its HEADER
//   Values (5, 6) are `control (1) | length (1) | bytes`: control bit 7 puts the next sequence
//   number in front, bit 6 delivers `EOM` instead, bit 5 (first value) puts a genuine prefix
//   in front.
// Every input is also parsed as a HELLO v2, the rest as the stream prefix answering it and as
// the content of every record kind (decoded contents must encode to the same bytes).
// Invariants (preconditions): no crash, typed one-line errors, a tampered transcript never
// completes both sides, an opened record is always one that was sealed, in order, a session
// completes only with the message that was sent and acknowledges only on the genuine ACK.

import Crypto

let fuzzInitiatorStatic = try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 1, count: 32))
let fuzzInitiatorEphemeral = [UInt8](repeating: 2, count: 32)
let fuzzResponderStatic = try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: [UInt8](repeating: 3, count: 32))
let fuzzResponderEphemeral = [UInt8](repeating: 4, count: 32)
let fuzzPrologue = Array("bletransfer framed v2 fuzz".utf8)

func fuzzInitiator() -> NoiseXXHandshake {
    NoiseXXHandshake(
        role: .initiator, staticKey: fuzzInitiatorStatic, prologue: fuzzPrologue,
        ephemeralKey: try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: fuzzInitiatorEphemeral))
}

func fuzzResponder() -> NoiseXXHandshake {
    NoiseXXHandshake(
        role: .responder, staticKey: fuzzResponderStatic, prologue: fuzzPrologue,
        ephemeralKey: try! Curve25519.KeyAgreement.PrivateKey(rawRepresentation: fuzzResponderEphemeral))
}

func checkOneLine(_ error: any Error) {
    let text = String(describing: error)
    precondition(!text.isEmpty && !text.contains("\n"), "error not one line")
}

struct Edit {
    var target: Int
    var offset: Int
    var xor: UInt8
    var truncate: Int
}

func edits(_ bytes: ArraySlice<UInt8>, targets: Int) -> [Edit] {
    var result: [Edit] = []
    var index = bytes.startIndex
    while index + 5 <= bytes.endIndex {
        result.append(
            Edit(
                target: Int(bytes[index]) % targets, offset: Int(bytes[index + 1]) << 8 | Int(bytes[index + 2]),
                xor: bytes[index + 3], truncate: Int(bytes[index + 4])))
        index += 5
    }
    return result
}

/// Applies the edits meant for `target`; true when the bytes changed.
func apply(_ edits: [Edit], target: Int, to message: inout [UInt8]) -> Bool {
    let original = message
    for edit in edits where edit.target == target && !message.isEmpty {
        message[edit.offset % message.count] ^= edit.xor
        if edit.truncate > 0 { message.removeLast(min(edit.truncate, message.count)) }
    }
    return message != original
}

func fuzzHandshakeAsInitiator(_ input: ArraySlice<UInt8>) {
    var initiator = fuzzInitiator()
    _ = try! initiator.writeMessage()
    do {
        _ = try initiator.readMessage(Array(input))
        // Noise lets any key pair answer; authorization is the caller's check, made next.
        precondition(initiator.remoteStaticKey != nil, "message 2 read without a static key")
    } catch {
        checkOneLine(error)
        precondition(initiator.hasFailed && !initiator.isComplete)
        precondition((try? initiator.writeMessage()) == nil, "wrote after a failure")
    }
}

func fuzzHandshakeAsResponder(_ input: ArraySlice<UInt8>) {
    var responder = fuzzResponder()
    guard input.count >= 2 else { return }
    let length = Int(input[input.startIndex]) << 8 | Int(input[input.startIndex + 1])
    let first = input.dropFirst(2).prefix(length)
    let third = input.dropFirst(2 + first.count)
    do {
        _ = try responder.readMessage(Array(first))
        _ = try responder.writeMessage()
        _ = try responder.readMessage(Array(third))
        precondition(responder.isComplete && responder.remoteStaticKey != nil, "message 3 read without a static key")
    } catch {
        checkOneLine(error)
        precondition(responder.hasFailed && !responder.isComplete)
    }
}

func fuzzTamperedTranscript(_ input: ArraySlice<UInt8>) {
    let planned = edits(input, targets: 3)
    var initiator = fuzzInitiator()
    var responder = fuzzResponder()
    var tampered = false
    do {
        var message = try initiator.writeMessage()
        tampered = apply(planned, target: 0, to: &message) || tampered
        _ = try responder.readMessage(message)
        message = try responder.writeMessage()
        tampered = apply(planned, target: 1, to: &message) || tampered
        _ = try initiator.readMessage(message)
        message = try initiator.writeMessage()
        tampered = apply(planned, target: 2, to: &message) || tampered
        _ = try responder.readMessage(message)
    } catch {
        checkOneLine(error)
    }
    let bothComplete = initiator.isComplete && responder.isComplete
    precondition(bothComplete != tampered, tampered ? "a tampered handshake completed" : "a genuine handshake failed")
    if bothComplete { precondition(initiator.handshakeHash == responder.handshakeHash) }
}

/// A genuine session's keys, computed once.
let fuzzTransport: (sealer: RecordSealer, opener: RecordOpener) = {
    var initiator = fuzzInitiator()
    var responder = fuzzResponder()
    _ = try! responder.readMessage(try! initiator.writeMessage())
    _ = try! initiator.readMessage(try! responder.writeMessage())
    _ = try! responder.readMessage(try! initiator.writeMessage())
    return (try! initiator.transportKeys(rekeyInterval: 2).sealer, try! responder.transportKeys(rekeyInterval: 2).opener)
}()

func fuzzRecords(_ input: ArraySlice<UInt8>) {
    let planned = edits(input, targets: 5)
    var sealer = fuzzTransport.sealer
    var opener = fuzzTransport.opener
    let originals = (0..<5).map { Record(kind: RecordKind.allCases[$0 % 6], content: [UInt8](repeating: UInt8($0), count: $0 * 7)) }
    var stream: [UInt8] = []
    for (index, record) in originals.enumerated() {
        var sealed = try! sealer.seal(record)
        _ = apply(planned, target: index, to: &sealed)
        stream += sealed
    }
    var reader = FrameReader()
    var opened = 0
    var offset = 0
    var step = Int(input.first ?? 1) % 64 + 1
    reading: while offset < stream.count {
        let end = min(stream.count, offset + step)
        do {
            for frame in try reader.append(stream[offset..<end]) {
                let record = try opener.open(frame)
                precondition(opened < originals.count && record == originals[opened], "a forged record opened")
                opened += 1
            }
        } catch {
            checkOneLine(error)
            break reading
        }
        offset = end
        step = step % 64 + 1
    }
}

func fuzzFiles(_ input: ArraySlice<UInt8>) {
    let text = String(decoding: input, as: UTF8.self)
    do {
        let peers = try AuthorizedPeers(parsing: text, path: "peers")
        for peer in peers.peers { precondition(peers.peer(for: peer.key) != nil) }
    } catch {
        checkOneLine(error)
    }
    do {
        let identity = try HostIdentity(parsing: text, path: "identity")
        precondition(identity.privateKeyBytes.count == 32)
    } catch {
        checkOneLine(error)
    }
    if let line = text.split(whereSeparator: \.isNewline).first {
        do {
            let (key, _) = try PeerKey.parseLine(line)
            precondition(key.rawBytes.count == 32 && key.fingerprint.count == 31)
        } catch {
            checkOneLine(error)
        }
    }
}

// MARK: Secure sessions

let fuzzPeripheral = HostIdentity(privateKey: fuzzInitiatorStatic, name: "peripheral")
let fuzzCentral = HostIdentity(privateKey: fuzzResponderStatic, name: "central")
let fuzzHello = HelloV2(session: 0x0102_0304_0506_0708, offered: [.secure, .meta])
let fuzzPayload = (0..<700).map { UInt8(truncatingIfNeeded: $0 &* 31) }
let fuzzDigest = Array(SHA256.hash(data: fuzzPayload))

func fuzzPeers(_ identity: HostIdentity) -> AuthorizedPeers {
    AuthorizedPeers([AuthorizedPeers.Peer(key: identity.publicKey, name: identity.name, line: 1)])
}

/// `control | length | bytes` values as the layout above says.
func fuzzValues(_ bytes: ArraySlice<UInt8>, firstSequence: Int,
                prefix: [UInt8] = StreamPrefix(answering: fuzzHello, supports: [.secure]).encoded) -> [[UInt8]] {
    var values: [[UInt8]] = []
    var sequence = firstSequence
    var index = bytes.startIndex
    while index + 2 <= bytes.endIndex {
        let control = bytes[index]
        let length = Int(bytes[index + 1])
        let body = Array(bytes[(index + 2)..<min(bytes.endIndex, index + 2 + length)])
        index += 2 + body.count
        if control & 0x40 != 0 {
            values.append([0x45, 0x4F, 0x4D])
            continue
        }
        var value: [UInt8] = []
        if control & 0x80 != 0 {
            value = [UInt8(truncatingIfNeeded: sequence >> 8), UInt8(truncatingIfNeeded: sequence)]
            sequence += 1
        }
        if values.isEmpty, control & 0x20 != 0 {
            value += prefix
        }
        values.append(value + body)
    }
    return values
}

func fuzzSender(valueLength: Int) -> SecureSenderSession {
    try! SecureSenderSession(
        identity: fuzzPeripheral, authorizedPeers: fuzzPeers(fuzzCentral), hello: fuzzHello, payload: MessagePayload(fuzzPayload),
        digest: fuzzDigest, metadata: FileMetadata(name: "f", modificationSeconds: 1, modificationNanoseconds: 2),
        maximumValueLength: valueLength)
}

func fuzzReceiver(valueLength: Int) -> SecureReceiverSession {
    SecureReceiverSession(
        identity: fuzzCentral, authorizedPeers: fuzzPeers(fuzzPeripheral), hello: fuzzHello,
        maximumPayloadLength: 1 << 20, maximumWriteLength: valueLength)
}

/// Feeds values to a receiver; a completed message must be the one sent (the bytes handed out,
/// kept as a central's shell keeps them). Returns the writes.
func feed(_ receiver: inout SecureReceiverSession, _ values: [[UInt8]]) -> [[UInt8]] {
    var writes: [[UInt8]] = []
    var kept: [UInt8] = []
    for value in values {
        do {
            for event in try receiver.receiveNotification(value) {
                switch event {
                case .write(let value): writes.append(value)
                case .header: kept = []
                case .appended(let offset, let bytes):
                    precondition(offset == kept.count, "bytes handed out out of order")
                    kept += bytes
                case .complete(let header):
                    precondition(kept == fuzzPayload && header.digest == fuzzDigest, "a forged message completed")
                default: break
                }
            }
        } catch {
            checkOneLine(error)
            precondition((try? receiver.receiveNotification([0, 0, 0, 0])) == nil, "read on after a failure")
            return writes
        }
    }
    return writes
}

let fuzzKeylessHello = HelloV2(session: 0x0102_0304_0506_0708,
                               offered: [.secure, .meta, .multi, .resume, .pipeline, .window])
let fuzzChannelHello = HelloV2(session: 0x0102_0304_0506_0708,
                               offered: [.secure, .meta, .multi, .resume, .pipeline, .window, .channel])

/// A central without keys (a run key, any sender's key let in): whatever the values, a prefix
/// without `secure` is refused, a completed message matches its HEADER, an error is one line
/// and ends the session, and held checkpoint bytes are asked for a sender key only.
func fuzzKeylessReceiverSession(_ input: ArraySlice<UInt8>) {
    let valueLength = 20 + Int(input.first ?? 0) % 493
    let overChannel = (input.first ?? 0) & 0x80 != 0
    let plainPrefix = (input.first ?? 0) & 0x40 != 0
    let hello = overChannel ? fuzzChannelHello : fuzzKeylessHello
    let held = Array(fuzzPayload.prefix(Int(input.dropFirst().first ?? 0) * 3))
    var receiver = SecureReceiverSession(
        identity: HostIdentity(privateKey: fuzzResponderStatic), authorizedPeers: .anyKey, hello: hello,
        maximumPayloadLength: 1 << 16, maximumWriteLength: valueLength)
    var kept: [UInt8] = []
    var digest = RunningDigest()
    let prefix = StreamPrefix(answering: hello, supports: plainPrefix ? hello.offered.subtracting(.secure) : hello.offered).encoded
    for value in fuzzValues(input.dropFirst(2), firstSequence: 0, prefix: prefix) {
        do {
            for event in try receiver.receiveNotification(value) {
                switch event {
                case .header:
                    kept = []
                    digest = RunningDigest()
                case .checkpointWanted(let header):
                    precondition(receiver.remotePeer != nil, "a checkpoint asked for without a sender key")
                    guard header.payloadLength >= UInt64(held.count), held.count > kept.count else { break }
                    var heldDigest = RunningDigest()
                    heldDigest.update(held)
                    if try !receiver.resume(heldBytes: held.count, digest: heldDigest).isEmpty {
                        kept = held
                        digest = heldDigest
                    }
                case .appended(let offset, let bytes):
                    precondition(offset == kept.count, "bytes handed out out of order")
                    kept += bytes
                    digest.update(bytes)
                case .complete(let header):
                    precondition(UInt64(kept.count) == header.payloadLength && digest.digest == header.digest,
                                 "a message completed unverified")
                    _ = try receiver.acknowledgement(outcome: 0)
                default:
                    break
                }
                if case .senderAuthenticated(let peer) = event {
                    precondition(!plainPrefix, "a session without `secure` reached a sender key")
                    precondition(!peer.isListed, "a key no file lists was taken as listed")
                }
            }
        } catch {
            checkOneLine(error)
            precondition((try? receiver.receiveNotification([0, 0, 0, 0])) == nil, "read on after a failure")
            return
        }
    }
}

func fuzzReceiverSession(_ input: ArraySlice<UInt8>) {
    guard let mode = input.first else { return }
    let valueLength = 20 + Int(input.dropFirst().first ?? 0) % 493
    var receiver = fuzzReceiver(valueLength: valueLength)
    if mode % 2 == 0 {
        let values = fuzzValues(input.dropFirst(2), firstSequence: 0)
        _ = feed(&receiver, values)
        return
    }
    // A genuine exchange whose notifications are edited and swapped.
    var sender = fuzzSender(valueLength: valueLength)
    let planned = edits(input.dropFirst(2), targets: 256)
    var generator = input.dropFirst(2).makeIterator()
    var sent = 0
    while true {
        var batch: [[UInt8]] = []
        while let value = sender.nextValue() { batch.append(value) }
        guard !batch.isEmpty else { return }
        for index in batch.indices { _ = apply(planned, target: (sent + index) % 256, to: &batch[index]) }
        if let swap = generator.next(), batch.count > 1 {
            batch.swapAt(Int(swap) % batch.count, (Int(swap) / 7) % batch.count)
        }
        sent += batch.count
        for write in feed(&receiver, batch) {
            do {
                _ = try sender.receiveWrite(write)
            } catch {
                checkOneLine(error)
                precondition(sender.nextValue() == nil, "sent on after a failure")
                return
            }
        }
    }
}

func fuzzSenderSession(_ input: ArraySlice<UInt8>) {
    guard let mode = input.first else { return }
    let valueLength = 20 + Int(input.dropFirst().first ?? 0) % 493
    var sender = fuzzSender(valueLength: valueLength)
    var notifications: [[UInt8]] = []
    while let value = sender.nextValue() { notifications.append(value) }
    var firstSequence = 0
    if mode % 2 == 1 {
        // Drive a genuine session to the point where the sender waits for the ACK.
        var receiver = fuzzReceiver(valueLength: valueLength)
        let message2 = feed(&receiver, notifications)
        for write in message2 { _ = try! sender.receiveWrite(write) }
        var rest: [[UInt8]] = []
        while let value = sender.nextValue() { rest.append(value) }
        _ = feed(&receiver, rest)
        precondition(sender.state == .awaitingAck, "a genuine session did not reach the ACK")
        firstSequence = message2.count
    }
    for value in fuzzValues(input.dropFirst(2), firstSequence: firstSequence) {
        do {
            for event in try sender.receiveWrite(value) {
                switch event {
                case .centralAuthenticated: preconditionFailure("a forged message 2 was authorized")
                case .acknowledged, .refusedByCentral: preconditionFailure("a forged ACK was accepted")
                case .closedByCentral: preconditionFailure("a forged CLOSE was accepted")
                case .resumed: preconditionFailure("a forged RESUME was accepted")
                }
            }
        } catch {
            checkOneLine(error)
            precondition(sender.state == .failed && sender.nextValue() == nil, "sent on after a failure")
            return
        }
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func trustFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    let rest = input[1...]
    // Every input is also a write a peripheral may get and a stream start a central may read.
    if let hello = HelloV2(parsing: input) {
        precondition(hello.offered.isSubset(of: .known) && HelloV2(parsing: hello.encoded) == hello)
        if let prefix = try? StreamPrefix(parsing: Array(rest), hello: hello) {
            precondition(prefix.chosen.isSubset(of: hello.offered) && prefix.session == hello.session)
        }
    }
    // ... and as the content of every record kind.
    for kind in RecordKind.allCases {
        do {
            let message = try RecordMessage(parsing: Record(kind: kind, content: Array(rest)))
            precondition(message.record == Record(kind: kind, content: Array(rest)), "record contents do not round-trip")
        } catch {
            checkOneLine(error)
        }
    }
    switch input[0] % 8 {
    case 0: fuzzHandshakeAsInitiator(rest)
    case 1: fuzzHandshakeAsResponder(rest)
    case 2: fuzzTamperedTranscript(rest)
    case 3: fuzzRecords(rest)
    case 4: fuzzFiles(rest)
    case 5: fuzzReceiverSession(rest)
    case 6: fuzzSenderSession(rest)
    default: fuzzKeylessReceiverSession(rest)
    }
    return 0
}
