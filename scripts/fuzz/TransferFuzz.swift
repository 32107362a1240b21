// libFuzzer entry point over everything a peer controls in the Transfer core: notification
// values fed to MessageReceiver (Apple's flow), and what a central writes that the peripheral
// recognises (a retired version-1 HELLO, UUID text). Built together with
// Sources/Transfer/*.swift into one module by scripts/fuzz-transfer.sh, so it reaches internal
// API without `import Transfer`.
//
// Input layout: byte 0 = flags (bits 1-2: which size limit), then values, each a 2-byte
// big-endian length (taken modulo 1024) followed by that many bytes.

let fuzzLimits = [0, 1, 64, 1024]

@_cdecl("LLVMFuzzerTestOneInput")
public func transferFuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data, size > 0 else { return 0 }
    let input = Array(UnsafeBufferPointer(start: data, count: size))

    // Peripheral side: arbitrary writes.
    if RetiredVersion1.isHello(input) { precondition(input.count == 14) }
    _ = RetiredVersion1.startsStream(input)
    _ = try? BluetoothUUID(String(decoding: input, as: UTF8.self))

    // Central side: arbitrary notification values.
    let limit = fuzzLimits[Int(input[0] >> 1) & 3]
    var receiver = MessageReceiver(limits: TransferLimits(maximumMessageSize: limit))
    var index = 1
    while index + 2 <= input.count {
        let length = (Int(input[index]) << 8 | Int(input[index + 1])) % 1024
        index += 2
        let end = min(input.count, index + length)
        let value = Array(input[index..<end])
        index = end
        do {
            if case .complete(let message) = try receiver.receive(value) {
                precondition(message.byteCount <= limit, "message over the limit")
                _ = message.text
            }
        } catch {
            precondition(!error.description.isEmpty && !error.description.contains("\n"))
        }
        // Memory stays bounded by the limit, never by what the peer sends.
        precondition(receiver.progress.bytesSoFar <= limit, "unbounded buffer")
    }
    if !receiver.isComplete { precondition(receiver.finishWithoutEOM() != nil) }
    return 0
}
