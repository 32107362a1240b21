import ArgumentParser
import Options

/// Runs the library's option checks (`OptionValidation`, `SenderOptions.validate()`, `ReceiverOptions.validate()`) as
/// the command line's own: an `InvalidOption` becomes a `ValidationError`, one line naming the option, status 64.
func checkingOptions(_ checks: () throws -> Void) throws {
    do {
        try checks()
    } catch let invalid as InvalidOption { throw ValidationError(invalid.description) }
}

/// `--count N` and `--forever` of `send` and `receive`: N must be a count, and the two exclude each other.
func checkingRepetition(count: Int?, forever: Bool) throws {
    if let count { try checkingOptions { _ = try OptionValidation.count(count, option: "--count") } }
    if forever && count != nil { throw ValidationError("--count and --forever cannot be combined") }
}
