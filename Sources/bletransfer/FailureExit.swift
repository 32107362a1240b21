import ArgumentParser
import Daemon
import Machines
import Roles

extension ExitStatus {
    init(_ kind: FailureKind) {
        switch kind {
        case .usage: self = .usage
        case .dataError: self = .dataError
        case .noInput: self = .noInput
        case .unavailable: self = .unavailable
        case .software: self = .software
        case .ioError: self = .ioError
        case .timedOut: self = .timedOut
        case .permissionDenied: self = .permissionDenied
        case .configuration: self = .configuration
        case .cannotCreate: self = .cannotCreate
        }
    }
}

/// Prints a failure as one line on standard error, followed by a `hint: …` line when there is
/// one, and returns the exit code to end with. Commands call this from their `run()` so every
/// failure a user can cause ends the same way; with `--json` the last event is an `error`
/// event carrying the same text, hint, kind and status.
func exitCode(reporting failure: any ClassifiedFailure, json: Bool, hint: String? = nil) -> ExitCode {
    let status = ExitStatus(failure.kind)
    if json {
        var event = ErrorJSONEvent(failure.userMessage, kind: failure.kind.rawValue, exitStatus: Int(status.rawValue))
        event.hint = hint
        EventRenderer.writeLine(JSONEvents.line("error", event), to: 1)
    }
    EventRenderer.writeLine("bletransfer: error: \(failure.userMessage)", to: 2)
    if let hint { EventRenderer.writeLine("hint: \(hint)", to: 2) }
    return status.exitCode
}

extension ExitStatus {
    /// The status as ArgumentParser ends a command with it.
    var exitCode: ExitCode { ExitCode(rawValue) }
}
