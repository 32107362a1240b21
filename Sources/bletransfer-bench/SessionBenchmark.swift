import ArgumentParser
import Crypto
import Machines
import Roles
import Transfer
import Trust

/// Version 2 as two bletransfer hosts speak it, without a radio: a sender session hands out
/// values, the central's reassembly (`MessageAssembly` over `SecureReceiverSession`, what
/// `receive` runs) takes them, and its writes (PROGRESS, the ACK) go back; always encrypted,
/// once between hosts that list each other's keys and once between keyless hosts (keys made
/// for the run, any key let in). Printed against a copy of the same bytes in value-sized appends; several
/// sizes show whether the cost per byte stays flat as a message grows.
struct SessionBenchmark: AsyncParsableCommand, PayloadSizeDefaults {
    static let configuration = CommandConfiguration(
        commandName: "session",
        abstract: "Framed send → receive throughput (MB/s), listed keys and keyless, against a copy baseline."
    )

    static let defaultSizes = "1,16"
    static let defaultRepetitions = 10
    static let minimumRuns = 2

    @OptionGroup var payloads: PayloadSizeOptions<SessionBenchmark>

    @Option(help: "Value length in bytes: 20 to 512 (ATT MTU − 3) over GATT; 513 to 8192 runs the session as over an L2CAP channel (`channel`), one SDU a value.")
    var valueLength: Int = 512

    mutating func run() async throws {
        let sizesInMiB = try payloads.sizesInMiB()
        guard (20...8192).contains(valueLength) else { throw ValidationError("--value-length must be 20 to 8192") }
        print("Version-2 session benchmark: \(valueLength)-byte values\(valueLength > 512 ? " (L2CAP channel)" : ""); "
              + "MB = 10^6 bytes; best of N runs")
        var perByte: [String: [Double]] = [:]
        for mib in sizesInMiB {
            let rows = try benchmark(size: mib * 1024 * 1024, runs: payloads.runs(forMiB: mib))
            for (name, seconds) in rows { perByte[name, default: []].append(seconds / Double(mib)) }
        }
        if sizesInMiB.count > 1, let smallest = sizesInMiB.min(), let largest = sizesInMiB.max(), largest > smallest {
            // Linear work keeps this near 1; a copy of the message so far per value makes it
            // grow with the size.
            print("\nseconds per MiB at \(largest) MiB ÷ at \(smallest) MiB:")
            for name in perByte.keys.sorted() {
                guard let values = perByte[name], let first = values.first, let last = values.last else { continue }
                print("  " + pad(name, 42) + pad(format(last / first, digits: 2), 8, right: true))
            }
        }
    }

    private func benchmark(size: Int, runs: Int) throws -> [(String, Double)] {
        let payload = seededPayload(size: size)
        let digest = Array(SHA256.hash(data: payload))
        print("\n\(size / 1024 / 1024) MiB payload, \(runs) runs")

        var rows: [(String, Double)] = []
        var sink = 0
        rows.append(("baseline: copy in value-sized appends", bestSeconds(of: runs) {
            sink &+= copyInValueSizedAppends(payload, valueLength: valueLength)
        }))
        for listed in [true, false] {
            var failure: String?
            let seconds = bestSeconds(of: runs) {
                do {
                    let received = try Self.transfer(payload, digest: digest, valueLength: valueLength, listedKeys: listed)
                    if received != payload { failure = "the received message differs from the one sent" }
                } catch {
                    failure = "\(error)"
                }
            }
            let mode = listed ? "listed keys" : "keyless"
            if let failure { throw ValidationError("\(mode): \(failure)") }
            rows.append(("\(mode): send → receive + verify", seconds))
        }

        printRates(rows, size: size)
        if sink == 42 { print("") }  // keeps the measured work observable
        return rows
    }

    /// One message from a sender session to the central's reassembly; the central's writes
    /// reach the sender before its next value. Returns the payload the central verified.
    private static func transfer(_ payload: [UInt8], digest: [UInt8], valueLength: Int, listedKeys: Bool) throws -> [UInt8] {
        // Values longer than an attribute's run as over an L2CAP channel.
        let overChannel = valueLength > 512
        var offered: Capabilities = [.secure, .meta, .multi, .window]
        if overChannel { offered.insert(.channel) }
        let helloV2 = HelloV2(session: 7, offered: offered)
        let peripheral = HostIdentity(), central = HostIdentity()
        var sender = try SecureSenderSession(
            identity: peripheral,
            authorizedPeers: listedKeys ? AuthorizedPeers([.init(key: central.publicKey, name: "c", line: 1)]) : .anyKey,
            hello: helloV2, payload: MessagePayload(payload), digest: digest, metadata: nil, maximumValueLength: valueLength,
            overChannel: overChannel)
        let receiver = SecureReceiverSession(
            identity: central,
            authorizedPeers: listedKeys ? AuthorizedPeers([.init(key: peripheral.publicKey, name: "p", line: 1)]) : .anyKey,
            hello: helloV2, maximumPayloadLength: payload.count, maximumWriteLength: valueLength)
        var assembly = MessageAssembly(
            limits: TransferLimits(maximumMessageSize: payload.count),
            idleTimeout: .seconds(3600), secure: receiver)
        var time = Duration.zero
        while true {
            guard let value = sender.nextValue() else {
                throw ValidationError("the sender stopped before the central had the message")
            }
            time += .microseconds(1)
            let step = assembly.handle(.value(value), at: time)
            for write in assembly.takeWrites() { _ = try sender.receiveWrite(write.value) }
            switch step {
            case .complete(let message, _): return message.payload
            case .failed(let failure): throw ValidationError("the central failed: \(failure)")
            case .proceed, .formatDetected, .sessionEnded: continue
            }
        }
    }
}
