import ArgumentParser
import Roles

/// The sender's bounds on a central: shared by `send` and
/// `daemon --role sender`, so both validate and document them the same way.
struct SenderBoundOptions: ParsableArguments {
    @Option(name: .customLong("ack-timeout"), help: ArgumentHelp(
        "Framed: seconds a central has to acknowledge after EOM before it is dropped (default 20).",
        valueName: "SECONDS"))
    var acknowledgementTimeout: Double?

    @Option(name: .customLong("unsubscribe-timeout"), help: ArgumentHelp(
        "Seconds a central has to unsubscribe after EOM (Apple's format) or after its ACK before it is dropped (default 20).",
        valueName: "SECONDS"))
    var unsubscribeTimeout: Double?

    @Option(name: .customLong("min-rate"), help: ArgumentHelp(
        "Slowest a central may take a message, in bytes per second, after a 60 s allowance; a slower one is dropped (default 256).",
        valueName: "BYTES"))
    var minimumRate: Int?

    /// A week: longer bounds are no bounds, and keep Duration arithmetic far from overflow.
    static let longestTimeout = 7.0 * 24 * 3600

    mutating func validate() throws {
        for (name, value) in [("--ack-timeout", acknowledgementTimeout), ("--unsubscribe-timeout", unsubscribeTimeout)] {
            if let value, !(value > 0 && value <= Self.longestTimeout) {
                throw ValidationError("\(name): give a number of seconds greater than 0 and at most \(Int(Self.longestTimeout)) (a week)")
            }
        }
        if let minimumRate, !(1...100_000_000).contains(minimumRate) {
            throw ValidationError("--min-rate: give a number of bytes per second from 1 to 100000000")
        }
    }

    /// `configuration` with these options applied.
    func applied(to configuration: PeripheralConfiguration) -> PeripheralConfiguration {
        var configuration = configuration
        if let acknowledgementTimeout { configuration.acknowledgementTimeout = .milliseconds(Int64(acknowledgementTimeout * 1000)) }
        if let unsubscribeTimeout { configuration.unsubscribeTimeout = .milliseconds(Int64(unsubscribeTimeout * 1000)) }
        if let minimumRate { configuration.minimumTransferRate = minimumRate }
        return configuration
    }
}
