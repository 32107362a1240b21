/// What to tell a user whose process may not talk to BlueZ (manager state `unauthorized`).
///
/// Facts behind the text (docs/unattended.md has the details): BlueZ installs its D-Bus policy as
/// `/etc/dbus-1/system.d/bluetooth.conf` (some systems: `/usr/share/dbus-1/system.d/`). Debian's copy lets every
/// local user send to `org.bluez` (`<policy context="default">`) and also names the group `bluetooth`; stricter
/// policies keep only the group rule. dbus-daemon decides group membership from the user database (`/etc/group`), not
/// from the supplementary groups of the calling process, and reads it when the connection is made: after `usermod -aG
/// bluetooth`, the bus must be reloaded and the program restarted.
package enum PermissionAdvice {
    /// The group that BlueZ's D-Bus policy lets talk to `org.bluez`.
    package static let bluetoothGroup = "bluetooth"
    /// Where distributions install BlueZ's D-Bus policy.
    package static let policyFile = "/etc/dbus-1/system.d/bluetooth.conf"

    /// One line for the `unauthorized` state: which group to join, which file grants it, and
    /// what to reload. `user` is the account name to put in the command, when known.
    package static func unauthorized(user: String?) -> String {
        "D-Bus policy denies access to org.bluez: " + remedy(user: user)
    }

    /// What to change, without saying what failed.
    package static func remedy(user: String?) -> String {
        let who = user ?? "$USER"
        return "add the user to the '\(bluetoothGroup)' group "
            + "(sudo usermod -aG \(bluetoothGroup) \(who); then sudo systemctl reload dbus and start again), "
            + "or allow it in \(policyFile) with <policy group=\"\(bluetoothGroup)\"><allow send_destination=\"org.bluez\"/></policy>"
    }
}
