import ArgumentParser
import Foundation

/// Checks shared by every size and duration option of `send`, `receive` and `daemon`, so
/// that no value a user can type reaches arithmetic that traps (`Duration.milliseconds` of a
/// huge `Double`, `header + limit` near `Int.max`) or an allocation the machine cannot make.
/// Each failure is a `ValidationError`: one line naming the option, exit status 64.
enum OptionValidation {
    /// The longest duration any option takes: a year. Longer is never meant, and far below
    /// what `Duration` holds, so conversions cannot overflow.
    static let maximumSeconds: Double = 366 * 24 * 3600
    /// The shortest: a millisecond (durations are kept in milliseconds).
    static let minimumSeconds: Double = 0.001

    /// The largest message any machine is allowed to accept, whatever its memory: a message is
    /// held whole in memory before it is verified and written, and the framed header counts
    /// lengths in 64 bits, so this keeps every sum far from overflow.
    static let hardMaximumMessageSize = 4 << 30

    /// The largest `--max-size` this machine can hold: a quarter of its physical memory (the
    /// message is held once while it arrives, once more while written), at most
    /// `hardMaximumMessageSize`.
    static func maximumMessageSize(physicalMemory: UInt64 = ProcessInfo.processInfo.physicalMemory) -> Int {
        let quarter = physicalMemory / 4
        return quarter >= UInt64(hardMaximumMessageSize) ? hardMaximumMessageSize : Int(quarter)
    }

    /// A duration option in seconds: finite, at least a millisecond (or exactly 0 when
    /// `allowZero`), at most a year.
    static func duration(_ seconds: Double, option: String, allowZero: Bool = false) throws -> Duration {
        let lowest = allowZero ? "0" : "0.001"
        guard seconds.isFinite, seconds <= maximumSeconds,
              seconds >= minimumSeconds || (allowZero && seconds == 0)
        else {
            throw ValidationError("\(option): give a number of seconds from \(lowest) to \(Int(maximumSeconds)) (a year)")
        }
        return .milliseconds(Int64((seconds * 1000).rounded()))
    }

    /// A size option in bytes: from `minimum` to `maximum`.
    static func byteCount(_ value: Int, option: String, minimum: Int = 1, maximum: Int = hardMaximumMessageSize,
                          why: String? = nil) throws -> Int {
        guard value >= minimum, value <= maximum else {
            let reason = why.map { " (\($0))" } ?? ""
            throw ValidationError("\(option): give a number of bytes from \(minimum) to \(maximum)\(reason)")
        }
        return value
    }

    /// `--max-size`: positive, and no larger than this machine can hold.
    static func maximumMessageSizeOption(_ value: Int, physicalMemory: UInt64 = ProcessInfo.processInfo.physicalMemory)
        throws -> Int
    {
        let ceiling = maximumMessageSize(physicalMemory: physicalMemory)
        return try byteCount(value, option: "--max-size", maximum: ceiling,
                             why: "a message is held in memory: at most a quarter of this machine's \(physicalMemory >> 20) MiB, at most 4 GiB")
    }

    /// A count option (messages, files): from `minimum` to a billion.
    static func count(_ value: Int, option: String, minimum: Int = 1) throws -> Int {
        guard value >= minimum, value <= 1_000_000_000 else {
            throw ValidationError("\(option): give a number from \(minimum) to 1000000000")
        }
        return value
    }
}
