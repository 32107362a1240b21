import ArgumentParser
import Roles
import Transfer

/// The sender's bounds on a central after `EOM`: shared by `send` and `daemon --role sender`, so
/// both parse and document them the same way; `SenderOptions` checks and maps them. (`--min-rate`,
/// the bound during a transfer, is `send`'s own option and, in the daemon, the one `--min-rate`
/// of both roles.)
struct SenderBoundOptions: ParsableArguments {
    @Option(name: .customLong("ack-timeout"), help: ArgumentHelp(
        "Framed: seconds a central has to acknowledge after EOM before it is dropped (default 20).",
        valueName: "SECONDS"))
    var acknowledgementTimeout: Double?

    @Option(name: .customLong("unsubscribe-timeout"), help: ArgumentHelp(
        "Seconds a central has to unsubscribe after EOM (Apple's format) or after its ACK before it is dropped (default 20).",
        valueName: "SECONDS"))
    var unsubscribeTimeout: Double?

    // Not a bound, but shared by `send` and `daemon --role sender` in the same way.
    @Option(name: .customLong("compat-delivery"), help: ArgumentHelp(
        "How values reach a central following Apple's flow: notify (as Apple's sample; in order only over one ATT bearer), indicate (each value confirmed before the next: in order over any number of bearers, one round trip per value), auto (indicate when this host's bluetoothd runs Enhanced ATT, [GATT] Channels > 1, as BlueZ does by default; notify otherwise). bletransfer centrals are served notifications either way. (default: auto)",
        valueName: "auto|notify|indicate"))
    var compatDelivery: CompatDelivery = .automatic

    @Option(name: .customLong("value-size"), help: ArgumentHelp(
        "The longest notification value to send, in bytes (20-512; default: what the link allows, ATT MTU - 3). Apple's sample sends 20.",
        valueName: "BYTES"))
    var valueSize: Int?

    /// The sender's options: these, and what the command takes besides (adapter and UUIDs
    /// come from `CommonRoleOptions.targeting(_:secureMode:)`).
    func senderOptions(localName: String, offersAcquireNotify: Bool, minimumRate: Int?) -> SenderOptions {
        var options = SenderOptions()
        options.localName = localName
        options.offersAcquireNotify = offersAcquireNotify
        options.acknowledgementTimeout = acknowledgementTimeout
        options.unsubscribeTimeout = unsubscribeTimeout
        options.minimumRate = minimumRate
        options.compatDelivery = compatDelivery
        options.valueSize = valueSize
        return options
    }
}

extension CompatDelivery: ExpressibleByArgument {}
