import ArgumentParser
import Transfer

/// Chunk and reassemble throughput of the Transfer core, against a plain copy and SHA-256 of
/// the same bytes measured in the same run, and against the fastest BLE link.
struct TransferBenchmark: AsyncParsableCommand, PayloadSizeDefaults {
    static let configuration = CommandConfiguration(
        commandName: "transfer",
        abstract: "Chunk + reassemble throughput (MB/s) of Apple's flow, with baselines (the secure format: session)."
    )

    @OptionGroup var payloads: PayloadSizeOptions<TransferBenchmark>

    @Option(help: "ATT MTU; values are MTU-3 bytes (at most 512).")
    var mtu: Int = 517

    static let defaultSizes = "1,64"
    static let defaultRepetitions = 20
    static let minimumRuns = 3

    /// LE 2M PHY with data length extension tops out near 1.4 Mbit/s of application data.
    static let fastestBLEBytesPerSecond = 175_000.0

    mutating func run() async throws {
        let sizesInMiB = try payloads.sizesInMiB()
        guard mtu >= 23 else { throw ValidationError("--mtu must be at least 23") }
        let valueLength = WireFormat.valueLength(forATTMTU: mtu)
        print("Transfer core benchmark: ATT MTU \(mtu) → \(valueLength)-byte values; MB = 10^6 bytes; best of N runs")
        print("BLE reference: \(format(Self.fastestBLEBytesPerSecond / 1e6, digits: 3)) MB/s (LE 2M PHY, best case)")
        for mib in sizesInMiB {
            try benchmark(size: mib * 1024 * 1024, valueLength: valueLength, runs: payloads.runs(forMiB: mib))
        }
    }

    private func benchmark(size: Int, valueLength: Int, runs: Int) throws {
        let payload = seededPayload(size: size)
        let limits = TransferLimits(maximumMessageSize: size)
        var sink = 0

        print("\n\(size / 1024 / 1024) MiB payload, \(runs) runs")
        var rows: [(String, Double)] = []

        rows.append(("baseline: copy in value-sized appends", bestSeconds(of: runs) {
            sink &+= copyInValueSizedAppends(payload, valueLength: valueLength)
        }))
        rows.append(("baseline: SHA-256", bestSeconds(of: runs) {
            sink &+= OutgoingMessage(payload: payload).digest.count
        }))

        let message = OutgoingMessage(payload: payload)
        rows.append(("compat: chunk", bestSeconds(of: runs) {
            var sender = MessageSender(message: message, maximumValueLength: valueLength)
            while let value = sender.nextValue() { sink &+= value.count }
        }))
        var sender = MessageSender(message: message, maximumValueLength: valueLength)
        var values: [[UInt8]] = []
        values.reserveCapacity(sender.valueCount)
        while let value = sender.nextValue() { values.append(value) }
        var received: [UInt8] = []
        rows.append(("compat: reassemble", bestSeconds(of: runs) {
            var receiver = MessageReceiver(limits: limits)
            for value in values {
                if case .complete(let message) = try? receiver.receive(value) { received = message.payload }
            }
        }))
        guard received == payload else { throw ValidationError("compat round trip did not reproduce the payload") }
        values = []
        rows.append(("compat: chunk → reassemble", bestSeconds(of: runs) {
            var sender = MessageSender(message: message, maximumValueLength: valueLength)
            var receiver = MessageReceiver(limits: limits)
            while let value = sender.nextValue() {
                if case .complete(let message) = try? receiver.receive(value) { sink &+= message.payload.count }
            }
        }))

        printRates(rows, size: size, reference: (column: "× BLE", bytesPerSecond: Self.fastestBLEBytesPerSecond))
        if sink == 42 { print("") }  // keeps the measured work observable
    }
}
