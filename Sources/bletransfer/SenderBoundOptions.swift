import ArgumentParser
import Roles

/// The sender's bounds on a central after `EOM`: shared by `send` and `daemon --role sender`, so
/// both validate and document them the same way. (`--min-rate`, the bound during a transfer,
/// is `send`'s own option and, in the daemon, the one `--min-rate` of both roles.)
struct SenderBoundOptions: ParsableArguments {
    @Option(name: .customLong("ack-timeout"), help: ArgumentHelp(
        "Framed: seconds a central has to acknowledge after EOM before it is dropped (default 20).",
        valueName: "SECONDS"))
    var acknowledgementTimeout: Double?

    @Option(name: .customLong("unsubscribe-timeout"), help: ArgumentHelp(
        "Seconds a central has to unsubscribe after EOM (Apple's format) or after its ACK before it is dropped (default 20).",
        valueName: "SECONDS"))
    var unsubscribeTimeout: Double?

    mutating func validate() throws {
        if let acknowledgementTimeout { _ = try OptionValidation.duration(acknowledgementTimeout, option: "--ack-timeout") }
        if let unsubscribeTimeout { _ = try OptionValidation.duration(unsubscribeTimeout, option: "--unsubscribe-timeout") }
    }

    /// `--ack-timeout` as a duration (validated already); nil when not given.
    var acknowledgementTimeoutDuration: Duration? {
        acknowledgementTimeout.flatMap { try? OptionValidation.duration($0, option: "--ack-timeout") }
    }

    /// `--unsubscribe-timeout` as a duration (validated already); nil when not given.
    var unsubscribeTimeoutDuration: Duration? {
        unsubscribeTimeout.flatMap { try? OptionValidation.duration($0, option: "--unsubscribe-timeout") }
    }

    /// `configuration` with these options applied (validated already).
    func applied(to configuration: PeripheralConfiguration) -> PeripheralConfiguration {
        var configuration = configuration
        if let limit = acknowledgementTimeoutDuration { configuration.acknowledgementTimeout = limit }
        if let limit = unsubscribeTimeoutDuration { configuration.unsubscribeTimeout = limit }
        return configuration
    }
}
