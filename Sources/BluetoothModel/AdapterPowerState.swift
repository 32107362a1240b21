/// BlueZ's Adapter1.PowerState (5.66): "on", "off", "off-enabling", "on-disabling", "off-blocked", as raw values.
/// `init(rawValue:)` is nil for a value this build does not know; fall back to Adapter1.Powered then.
public enum AdapterPowerState: String, Sendable, Hashable, CaseIterable, Codable {
    case on
    case off
    case offEnabling = "off-enabling"
    case onDisabling = "on-disabling"
    case offBlocked = "off-blocked"
}
