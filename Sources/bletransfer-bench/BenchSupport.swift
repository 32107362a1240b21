/// What the benchmarks share: payload sizes from the command line, seeded payloads, the copy
/// baseline, the table formatting.

import ArgumentParser
import Foundation
import TestSupport

/// `--sizes` ("1,64"): whole MiB counts, each positive.
func parseSizesInMiB(_ text: String) throws -> [Int] {
    let sizes = text.split(separator: ",").compactMap { Int($0.filter { !$0.isWhitespace }) }
    guard !sizes.isEmpty, sizes.allSatisfy({ $0 > 0 }) else {
        throw ValidationError("--sizes must be positive whole MiB counts, e.g. 1,64")
    }
    return sizes
}

/// What a throughput benchmark sets for `PayloadSizeOptions`: its default sizes and
/// repetitions, and the fewest runs any size gets.
protocol PayloadSizeDefaults {
    static var defaultSizes: String { get }
    static var defaultRepetitions: Int { get }
    static var minimumRuns: Int { get }
}

/// `--sizes` and `--repetitions` of the throughput benchmarks (`transfer`, `session`): the
/// payload sizes to measure, and how often to measure each, fewer times the larger it is.
struct PayloadSizeOptions<Defaults: PayloadSizeDefaults>: ParsableArguments {
    @Option(help: "Payload sizes in MiB, comma-separated.")
    var sizes: String = Defaults.defaultSizes

    @Option(help: "Repetitions per measurement for a 1 MiB payload (fewer for larger ones).")
    var repetitions: Int = Defaults.defaultRepetitions

    func sizesInMiB() throws -> [Int] { try parseSizesInMiB(sizes) }

    /// How often a payload of `mib` MiB is measured.
    func runs(forMiB mib: Int) -> Int { max(Defaults.minimumRuns, repetitions / mib) }
}

/// The table a throughput benchmark prints for one payload size: each row's rate in MB/s and
/// against the first row's (the copy baseline) and, with `reference`, against that rate too.
func printRates(_ rows: [(String, Double)], size: Int, reference: (column: String, bytesPerSecond: Double)? = nil,
                nameWidth: Int = 44) {
    let copyBytesPerSecond = Double(size) / rows[0].1
    print(pad("measurement", nameWidth) + pad("MB/s", 10, right: true) + pad("× copy", 10, right: true)
          + (reference.map { pad($0.column, 12, right: true) } ?? ""))
    for (name, seconds) in rows {
        let rate = Double(size) / seconds
        print(pad(name, nameWidth) + pad(format(rate / 1e6, digits: 1), 10, right: true)
              + pad(format(rate / copyBytesPerSecond, digits: 3), 10, right: true)
              + (reference.map { pad(format(rate / $0.bytesPerSecond, digits: 0), 12, right: true) } ?? ""))
    }
}

/// `size` pseudo-random bytes, the same for the same size in every run.
func seededPayload(size: Int) -> [UInt8] {
    var generator = SeededGenerator(seed: UInt64(size))
    var payload = [UInt8](repeating: 0, count: size)
    for index in payload.indices { payload[index] = UInt8(truncatingIfNeeded: generator.next()) }
    return payload
}

/// The baseline every transfer is printed against: `payload` copied into a new array in
/// appends of `valueLength` bytes. Returns the bytes copied.
func copyInValueSizedAppends(_ payload: [UInt8], valueLength: Int) -> Int {
    var copy: [UInt8] = []
    copy.reserveCapacity(payload.count)
    var offset = 0
    while offset < payload.count {
        let end = min(offset + valueLength, payload.count)
        copy.append(contentsOf: payload[offset..<end])
        offset = end
    }
    return copy.count
}

/// `value` with `digits` decimals; "-" when it is not finite (a run too short to time).
func format(_ value: Double, digits: Int) -> String {
    value.isFinite ? String(format: "%.\(digits)f", value) : "-"
}

func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
    let padding = String(repeating: " ", count: max(0, width - text.count))
    return right ? padding + text : text + padding
}

/// Best wall time of `runs` calls, in seconds.
func bestSeconds(of runs: Int, _ body: () -> Void) -> Double {
    let clock = ContinuousClock()
    var best = Double.infinity
    for _ in 0..<runs {
        let elapsed = clock.measure(body)
        best = min(best, elapsed.seconds)
    }
    return best
}
