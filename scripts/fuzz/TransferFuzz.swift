// libFuzzer entry point over everything a peer controls in the Transfer core: notification
// values fed to MessageReceiver, and HELLO / ACK / UUID text parsed on the peripheral side.
// Built together with Sources/Transfer/*.swift into one module by scripts/fuzz-transfer.sh,
// so it reaches internal API without `import Transfer`.
//
// Input layout: byte 0 = flags (bit 0: the central wrote a HELLO; bits 1-2: which size limit),
// then values, each a 2-byte big-endian length (taken modulo 1024) followed by that many bytes.
// Framed values start with their own 2-byte sequence number (see docs/wire-formats.md, "Framed values"), so the
// fuzzer reorders, repeats and drops framed values by editing those bytes.

let fuzzSession = SessionID(rawValue: 0x5EED)
let fuzzLimits = [0, 1, 64, 1024]
/// The header, and the sequence numbers of values held while the format is undecided.
let fuzzOverhead = FramedHeader.encodedLength + WireFormat.framedSequenceLength * WireFormat.reorderWindow

@_cdecl("LLVMFuzzerTestOneInput")
public func transferFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))

    // Peripheral side: arbitrary writes.
    if let hello = WireFormat.parseHello(input) { precondition(hello.version >= 1) }
    if let ack = WireFormat.parseAck(input) { precondition(ack.digestPrefix.count == Ack.digestPrefixLength) }
    _ = try? BluetoothUUID(String(decoding: input, as: UTF8.self))

    // Central side: arbitrary notification values.
    let flags = input[0]
    let limit = fuzzLimits[Int(flags >> 1) & 3]
    var receiver = MessageReceiver(
        limits: TransferLimits(maximumMessageSize: limit),
        sentHello: flags & 1 == 1 ? Hello(session: fuzzSession) : nil)
    var index = 1
    while index + 2 <= input.count {
        let length = (Int(input[index]) << 8 | Int(input[index + 1])) % 1024
        index += 2
        let end = min(input.count, index + length)
        let value = Array(input[index..<end])
        index = end
        do {
            if case .complete(let message) = try receiver.receive(value) {
                precondition(message.payload.count <= limit, "message over the limit")
                if let header = message.header {
                    precondition(header.payloadLength == message.payload.count, "length not verified")
                    precondition(FramedHeader.sha256(message.payload) == header.digest, "digest not verified")
                    precondition(header.session == fuzzSession, "session not verified")
                }
                _ = message.text
            }
        } catch {
            precondition(!error.description.isEmpty && !error.description.contains("\n"))
            precondition(receiver.bufferedByteCount == 0, "refused stream kept its buffer")
        }
        // Memory stays bounded by the limit, never by what the peer sends.
        precondition(receiver.bufferedByteCount <= limit + fuzzOverhead, "unbounded buffer")
        precondition(receiver.valuesHeldOutOfOrder < WireFormat.reorderWindow, "unbounded reorder buffer")
    }
    if !receiver.isComplete { precondition(receiver.finishWithoutEOM() != nil) }
    return 0
}
