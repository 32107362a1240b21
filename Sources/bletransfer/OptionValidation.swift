import ArgumentParser
import Roles

/// Runs the library's option checks (`OptionValidation`, `SenderOptions.validate()`,
/// `ReceiverOptions.validate()`) as the command line's own: an `InvalidOption` becomes a
/// `ValidationError`, one line naming the option, exit status 64.
func checkingOptions(_ checks: () throws -> Void) throws {
    do {
        try checks()
    } catch let invalid as InvalidOption {
        throw ValidationError(invalid.description)
    }
}
