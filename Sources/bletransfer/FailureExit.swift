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

/// Prints a failure as one line on standard error and returns the exit code to end with.
/// Commands call this from their `run()` so every failure a user can cause ends the same way.
func exitCode(reporting failure: any ClassifiedFailure, json: Bool) -> ExitCode {
    let status = ExitStatus(failure.kind)
    if json {
        EventRenderer.writeLine(
            JSONEvents.line("error", ErrorJSONEvent(failure.userMessage, kind: failure.kind.rawValue,
                                                    exitStatus: Int(status.rawValue))),
            to: 1)
    }
    EventRenderer.writeLine("bletransfer: error: \(failure.userMessage)", to: 2)
    return status.exitCode
}

extension ExitStatus {
    /// The status as ArgumentParser ends a command with it.
    var exitCode: ExitCode { ExitCode(rawValue) }
}
