import Foundation
import Roles
import Transfer

/// An option value a user typed that no run can take: one line naming the option and what
/// it takes. The command line reports it as a usage error (exit status 64).
package struct InvalidOption: Error, Equatable, CustomStringConvertible {
    /// The option as typed on the command line ("--ack-timeout").
    package let option: String
    /// What it takes ("give a duration from 1ms to 366d, such as 30s or 5m (a plain number is seconds)").
    package let problem: String

    package init(_ option: String, _ problem: String) {
        self.option = option
        self.problem = problem
    }

    package var description: String { "\(option): \(problem)" }
}

/// Byte counts as messages show them: in the largest binary multiple dividing them (64M, not 67108864).
package enum ByteSize {
    package static func text(_ bytes: Int) -> String {
        for (suffix, shift) in [("T", 40), ("G", 30), ("M", 20), ("K", 10)] where bytes != 0 && bytes % (1 << shift) == 0 {
            return "\(bytes >> shift)\(suffix)"
        }
        return String(bytes)
    }
}

/// Checks shared by every size and duration option of `send`, `receive` and `daemon`: no typed value reaches arithmetic
/// that traps (`Duration.milliseconds` of a huge `Double`, `header + limit` near `Int.max`) or a failing allocation.
package enum OptionValidation {
    /// The longest duration any option takes: a year; never meant longer, and far below `Duration`'s overflow.
    package static let maximumSeconds: Double = 366 * 24 * 3600
    /// The shortest: a millisecond (durations are kept in milliseconds).
    package static let minimumSeconds: Double = 0.001

    /// The largest message any machine holds in memory, whatever its memory (one going to
    /// standard output or coming in Apple's flow is held whole before it is written).
    package static let hardMaximumMessageSize = 4 << 30

    /// The largest message this machine holds in memory: a quarter of its physical memory (the message is held once
    /// while it arrives, once more while written), at most `hardMaximumMessageSize`.
    package static func maximumMessageSize(physicalMemory: UInt64 = ProcessInfo.processInfo.physicalMemory) -> Int {
        let quarter = physicalMemory / 4
        return quarter >= UInt64(hardMaximumMessageSize) ? hardMaximumMessageSize : Int(quarter)
    }

    /// A duration option in seconds: finite, at least a millisecond (or exactly 0 when `allowZero`), at most a year.
    package static func duration(_ seconds: Double, option: String, allowZero: Bool = false) throws(InvalidOption) -> Duration {
        let lowest = allowZero ? "0" : "1ms"
        guard seconds.isFinite, seconds <= maximumSeconds,
              seconds >= minimumSeconds || (allowZero && seconds == 0)
        else {
            throw InvalidOption(option, "give a duration from \(lowest) to 366d, such as 30s or 5m (a plain number is seconds)")
        }
        return .milliseconds(roundingSeconds: seconds)
    }

    /// A size option in bytes: from `minimum` to `maximum`.
    package static func byteCount(_ value: Int, option: String, minimum: Int = 1, maximum: Int = hardMaximumMessageSize,
                                 why: String? = nil) throws(InvalidOption) -> Int {
        guard value >= minimum, value <= maximum else {
            let reason = why.map { " (\($0))" } ?? ""
            throw InvalidOption(option, "give a size from \(ByteSize.text(minimum)) to \(ByteSize.text(maximum))\(reason)")
        }
        return value
    }

    /// `--max-size`: positive, at most a pebibyte. A message written to disk as it comes (a directory receiver's
    /// framed messages, a sender's file) may be that large; one held in memory (standard output, Apple's flow) is
    /// bounded by ``maximumMessageSize(physicalMemory:)`` whatever this says (``ReceiverOptions/limits``).
    package static func maximumMessageSizeOption(_ value: Int) throws(InvalidOption) -> Int {
        try byteCount(value, option: "--max-size", maximum: largestStoredMessageSize,
                      why: "a message's size must fit a file")
    }

    /// 1 PiB: beyond any disk a receiver has, and far from overflowing the sums of offsets.
    package static let largestStoredMessageSize = 1 << 50

    /// A count option (messages, files): from `minimum` to a billion.
    package static func count(_ value: Int, option: String, minimum: Int = 1) throws(InvalidOption) -> Int {
        guard value >= minimum, value <= 1_000_000_000 else {
            throw InvalidOption(option, "give a number from \(minimum) to 1000000000")
        }
        return value
    }

    /// `--min-rssi`: a signal strength in dBm, from -127 to 20 (what HCI reports).
    package static func signalStrength(_ value: Int, option: String) throws(InvalidOption) -> Int {
        guard (-127...20).contains(value) else {
            throw InvalidOption(option, "give a signal strength in dBm between -127 and 20")
        }
        return value
    }
}
