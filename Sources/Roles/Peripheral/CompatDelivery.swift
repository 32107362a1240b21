import BlueZ
import Machines

/// How the sender hands values to a central following Apple's flow (compat), whose format has no sequence numbers:
/// the order the central receives is the message.
///
/// With Enhanced ATT (BlueZ's default `[GATT] Channels = 3`) bluetoothd spreads one characteristic's notifications
/// over every ATT bearer of the link, and the receiving host may read them out of order (scripts/lab/README.md,
/// "Ordering on stock BlueZ"). An indication is only sent after the previous one was confirmed, so serving Apple's
/// characteristic with indications and writing each value only after bluetoothd reported the previous confirmation
/// keeps the order on any number of bearers, at one round trip per value.
package enum CompatDelivery: String, Sendable, CaseIterable {
    /// Indications when bluetoothd may open several ATT bearers, else notifications (`[GATT] Channels = 1`: in order).
    case automatic = "auto"
    /// Notifications, as Apple's sample: fastest, in order only over a single ATT bearer.
    case notifications = "notify"
    /// Confirmed indications: each value is confirmed by the central before the next leaves.
    case indications = "indicate"

    /// Whether Apple's characteristic carries indications on a host with `setting`.
    package func usesIndications(on setting: GATTChannelSetting) -> Bool {
        switch self {
        case .automatic: setting.allowsEnhancedATT
        case .notifications: false
        case .indications: true
        }
    }
}
