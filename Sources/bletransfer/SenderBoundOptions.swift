import ArgumentParser
import Options
import Roles
import Transfer

/// The sender's bounds on a central after `EOM`: shared by `send` and `daemon --role sender`, so both parse and
/// document them the same way; `SenderOptions` checks and maps them. (`--min-rate`, the bound during a transfer, is
/// `send`'s own option and, in the daemon, the one `--min-rate` of both roles.)
struct SenderBoundOptions: ParsableArguments {
    @Option(name: .customLong("ack-timeout"), help: ArgumentHelp(
        "Drop a central not ACKing by then (default 20s).", valueName: "TIME"), transform: seconds)
    var acknowledgementTimeout: Double?

    @Option(name: .customLong("unsubscribe-timeout"), help: ArgumentHelp(
        "Drop a central subscribed after EOM (default 20s).", valueName: "TIME"), transform: seconds)
    var unsubscribeTimeout: Double?

    /// The sender's options: these, `delivery`, and what the command takes besides (adapter and
    /// UUIDs come from `BluetoothOptions.targeting(_:secureMode:transport:)`).
    func senderOptions(localName: String, offersAcquireNotify: Bool, minimumRate: Int?,
                       delivery: SenderDeliveryOptions) -> SenderOptions {
        var options = SenderOptions()
        options.localName = localName
        options.offersAcquireNotify = offersAcquireNotify
        options.acknowledgementTimeout = acknowledgementTimeout
        options.unsubscribeTimeout = unsubscribeTimeout
        options.minimumRate = minimumRate
        options.compatDelivery = delivery.compatDelivery
        options.valueSize = delivery.valueSize
        return options
    }
}

/// How the sender shapes values for a central (advanced): shared by `send` and `daemon --role sender`.
struct SenderDeliveryOptions: ParsableArguments {
    @Option(name: .customLong("compat-delivery"), help: ArgumentHelp("How Apple's format is sent.", valueName: "MODE"))
    var compatDelivery: CompatDelivery = .automatic

    @Option(name: .customLong("value-size"), help: ArgumentHelp(
        "Longest value sent, 20-512 (default: ATT MTU - 3).", valueName: "BYTES"), transform: bytes)
    var valueSize: Int?
}

/// `--name` of `send` and `daemon --role sender`.
struct AdvertisedNameOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "Local name to advertise (at most \(AdvertisedName.maximumByteCount) bytes).", valueName: "NAME"))
    var name: String?
}

extension CompatDelivery: ExpressibleByArgument {}
