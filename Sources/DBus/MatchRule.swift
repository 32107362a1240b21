/// A signal match rule (`type='signal'` plus the fields set), as installed with `AddMatch`.
package struct MatchRule: Sendable, Hashable {
    package var sender: String?
    package var path: ObjectPath?
    package var pathNamespace: ObjectPath?
    package var interface: String?
    package var member: String?
    package var arg0: String?

    package init(
        sender: String? = nil, path: ObjectPath? = nil, pathNamespace: ObjectPath? = nil,
        interface: String? = nil, member: String? = nil, arg0: String? = nil
    ) {
        self.sender = sender
        self.path = path
        self.pathNamespace = pathNamespace
        self.interface = interface
        self.member = member
        self.arg0 = arg0
    }

    /// "type='signal',sender='org.bluez',..." with values quoted as the bus expects.
    package var ruleString: String {
        var parts = ["type='signal'"]
        func add(_ key: String, _ value: String?) {
            if let value { parts.append("\(key)=\(MatchRule.quote(value))") }
        }
        add("sender", sender)
        add("path", path?.rawValue)
        add("path_namespace", pathNamespace?.rawValue)
        add("interface", interface)
        add("member", member)
        add("arg0", arg0)
        return parts.joined(separator: ",")
    }

    /// The bus's quoting: values in single quotes; a single quote itself is written '\''.
    static func quote(_ value: String) -> String {
        "'" + value.split(separator: "'", omittingEmptySubsequences: false).joined(separator: "'\\''") + "'"
    }

    /// `NameOwnerChanged` for one name (sender org.freedesktop.DBus, arg0 = name).
    package static func nameOwnerChanged(name: String) -> MatchRule {
        MatchRule(
            sender: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "NameOwnerChanged", arg0: name)
    }

    /// Whether a received signal's header satisfies the rule (all but `arg0`). `senderOwner` is the unique name owning
    /// a well-known `sender`: the bus matches senders by owner, so a signal from ":1.7" matches sender='org.bluez'
    /// while :1.7 owns org.bluez.
    func matchesHeader(sender signalSender: String, path signalPath: ObjectPath, interface signalInterface: String,
                       member signalMember: String, senderOwner: String?) -> Bool {
        if let sender, sender != signalSender {
            guard !sender.hasPrefix(":"), let senderOwner, senderOwner == signalSender else { return false }
        }
        if let path, path != signalPath { return false }
        if let pathNamespace, pathNamespace != signalPath, !signalPath.isDescendant(of: pathNamespace) {
            return false
        }
        if let interface, interface != signalInterface { return false }
        if let member, member != signalMember { return false }
        return true
    }

    func matchesArguments(_ arguments: [DBusValue]) -> Bool {
        guard let arg0 else { return true }
        guard let first = arguments.first, case .string(let value) = first else { return false }
        return value == arg0
    }

    /// True when `sender` is a well-known name whose owner must be tracked to match locally.
    var senderNeedsOwnerTracking: Bool {
        guard let sender else { return false }
        return !sender.hasPrefix(":") && sender != "org.freedesktop.DBus"
    }
}
