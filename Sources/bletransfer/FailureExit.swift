import ArgumentParser
import Daemon
import Machines
import Trust


/// Prints a failure as one line on standard error, followed by a `hint: …` line when there is one, and returns the
/// exit code to end with. Commands call this from their `run()` so every failure a user can cause ends the same way;
/// with `--json` the last event is an `error` event carrying the same text, hint, kind and status.
func exitCode(reporting failure: any ClassifiedFailure, json: Bool, hint: String? = nil) -> ExitCode {
    let hint = hint ?? (failure as? CommandFailure)?.hint
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

/// A command's failure with what to do about it: the `hint:` line `exitCode(reporting:json:)` prints after the error.
struct CommandFailure: ClassifiedFailure, CustomStringConvertible {
    var kind: FailureKind
    var userMessage: String
    var hint: String?

    init(_ kind: FailureKind, _ userMessage: String, hint: String? = nil) {
        self.kind = kind
        self.userMessage = userMessage
        self.hint = hint
    }

    init(_ failure: RoleFailure, hint: String? = nil) { self.init(failure.kind, failure.userMessage, hint: hint) }

    var description: String { userMessage }

    /// Runs `body`, its `RoleFailure` as a `CommandFailure`.
    static func lifting<T>(_ body: () throws(RoleFailure) -> T) throws(CommandFailure) -> T {
        do { return try body() } catch { throw CommandFailure(error) }
    }
}

/// "did you mean 'laptop'?" for a peer name that names nobody, when one listed is close.
func nearestPeerHint(_ given: String, in file: AuthorizedPeersFile) -> String? {
    let names = file.entries.compactMap(\.name)
    guard let nearest = CommandLineFront.nearest(to: given, among: names) else {
        return names.isEmpty ? nil : "'bletransfer peers list' shows the names"
    }
    return "did you mean '\(nearest)'? ('bletransfer peers list' shows the names)"
}
