import CDBus

struct SignalSubscription: Sendable {
    let id: UInt64
    let rule: MatchRule
    let continuation: AsyncStream<DBusSignal>.Continuation

    func finish() { continuation.finish() }
}

/// Delivers received signals to the subscriptions whose rules they match, and keeps the bus's match rules in step
/// (one AddMatch per subscription, one RemoveMatch when it ends; the bus counts identical rules).
///
/// `@unchecked Sendable`: every member is used only on the reactor thread (jobs and the loop's message handler).
final class SignalRouter: @unchecked Sendable {
    private var subscriptions: [UInt64: SignalSubscription] = [:]
    /// Well-known sender name -> current unique owner, for names rules refer to.
    private(set) var owners: [String: String] = [:]
    private var ownerWatchCounts: [String: Int] = [:]
    /// Names whose owner NameOwnerChanged reported since the watch began (newer than any GetNameOwner answer on its way).
    private var ownerReportedBySignal: Set<String> = []

    func add(_ subscription: SignalSubscription, loop: EventLoop) {
        subscriptions[subscription.id] = subscription
        if subscription.rule.senderNeedsOwnerTracking, let name = subscription.rule.sender {
            ownerWatchCounts[name, default: 0] += 1
            if ownerWatchCounts[name] == 1, let connection = loop.connection {
                // Without an error pointer libdbus sends AddMatch without waiting for the reply.
                dbus_bus_add_match(connection, MatchRule.nameOwnerChanged(name: name).ruleString, nil)
            }
        }
    }

    func remove(id: UInt64, loop: EventLoop) {
        guard let subscription = subscriptions.removeValue(forKey: id) else { return }
        guard let connection = loop.connection else { return }
        dbus_bus_remove_match(connection, subscription.rule.ruleString, nil)
        if subscription.rule.senderNeedsOwnerTracking, let name = subscription.rule.sender {
            ownerWatchCounts[name, default: 1] -= 1
            if ownerWatchCounts[name] == 0 {
                ownerWatchCounts[name] = nil
                owners[name] = nil
                ownerReportedBySignal.remove(name)
                dbus_bus_remove_match(connection, MatchRule.nameOwnerChanged(name: name).ruleString, nil)
            }
        }
    }

    /// The answer to GetNameOwner, unless NameOwnerChanged already told us something newer.
    func setInitialOwner(_ owner: String?, of name: String) {
        guard ownerWatchCounts[name] != nil, !ownerReportedBySignal.contains(name) else { return }
        owners[name] = owner
    }

    func finishAll() {
        let all = subscriptions.values
        subscriptions.removeAll()
        for subscription in all { subscription.finish() }
    }

    /// Routes one received signal (loop thread).
    func route(_ message: Message) {
        guard let path = message.path, let interface = message.interface, let member = message.member else {
            return
        }
        let sender = message.sender
        var arguments: [DBusValue]? = nil

        if sender == "org.freedesktop.DBus", interface == "org.freedesktop.DBus", member == "NameOwnerChanged",
            !ownerWatchCounts.isEmpty
        {
            arguments = try? message.arguments()
            if let arguments, arguments.count == 3, let name = arguments[0].string,
                let newOwner = arguments[2].string, ownerWatchCounts[name] != nil
            {
                owners[name] = newOwner.isEmpty ? nil : newOwner
                ownerReportedBySignal.insert(name)
            }
        }

        var signal: DBusSignal? = nil
        for subscription in subscriptions.values {
            let rule = subscription.rule
            guard
                rule.matchesHeader(
                    sender: sender, path: path, interface: interface, member: member,
                    senderOwner: rule.sender.flatMap { owners[$0] })
            else { continue }
            if arguments == nil {
                // A signal that cannot be read (not expected from a validated message) is dropped.
                guard let parsed = try? message.arguments() else { return }
                arguments = parsed
            }
            guard rule.matchesArguments(arguments!) else { continue }
            if signal == nil {
                signal = DBusSignal(sender: sender, path: path, interface: interface, member: member, arguments: arguments!)
            }
            subscription.continuation.yield(signal!)
        }
    }
}
