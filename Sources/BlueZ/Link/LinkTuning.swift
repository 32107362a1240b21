/// What holds a link setting back from the best both hosts allow.
package enum LinkLimit: String, Sendable, Hashable, Codable {
    case peer  // the peer refused it, or its controller lacks it
    case controller  // this host's controller lacks it
    case configuration  // this host's configuration chose otherwise (main.conf, or tuning left off)
    case privilege  // it needs a privilege the process lacks (CAP_NET_ADMIN or CAP_NET_RAW)
}

/// One setting tuning could not make, and why.
package struct LinkRefusal: Sendable, Hashable, Codable {
    package var setting: String
    package var limit: LinkLimit
    package var detail: String
}

/// The adapter-wide defaults bletransfer asks for, and the kernel's own (Linux net/bluetooth/hci_core.c).
package struct AdapterLinkTarget: Sendable, Hashable {
    /// 1.25 ms units: 7.5–15 ms while tuned, the kernel's 30–50 ms otherwise.
    package var connectionInterval: ClosedRange<UInt16>
    package var latency: UInt16
    package var supervisionTimeout: UInt16  // 10 ms units
    package var advertisingInterval: ClosedRange<UInt16>  // 0.625 ms units
    package var twoM: Bool

    /// The fastest link the specification allows: 7.5–15 ms (a controller picks within the range, and many refuse
    /// 7.5 ms), 2M, no latency. Advertising at 152.5–170 ms (Apple's accessory guidelines' second step after 30 s at
    /// 20 ms): a central scanning at the kernel's 50 % duty cycle hears it within about a third of a second, not the
    /// kernel's 1.28 s. The supervision timeout stays the kernel's.
    package static let tuned = AdapterLinkTarget(connectionInterval: 6...12, latency: 0, supervisionTimeout: 42,
                                                 advertisingInterval: 0x00F4...0x0110, twoM: true)
    /// le_conn_min/max_interval 0x0018/0x0028, le_conn_latency 0, le_supv_timeout 0x002a, le_adv_min/max 0x0800.
    package static let kernel = AdapterLinkTarget(connectionInterval: 24...40, latency: 0, supervisionTimeout: 42,
                                                  advertisingInterval: 0x0800...0x0800, twoM: false)

    package var systemConfiguration: SystemConfiguration {
        SystemConfiguration([.connectionMinInterval: connectionInterval.lowerBound,
                             .connectionMaxInterval: connectionInterval.upperBound,
                             .connectionLatency: latency,
                             .supervisionTimeout: supervisionTimeout,
                             .advertisingMinInterval: advertisingInterval.lowerBound,
                             .advertisingMaxInterval: advertisingInterval.upperBound])
    }

    /// Whether `configuration` already asks for this target's connection interval.
    package func isMet(by configuration: SystemConfiguration) -> Bool {
        configuration[.connectionMinInterval] == connectionInterval.lowerBound
            && configuration[.connectionMaxInterval] == connectionInterval.upperBound
    }
}

/// What tuning an adapter did: the settings made, those left as they were and why.
package struct AdapterTuningOutcome: Sendable, Hashable {
    package var applied: [String] = []
    package var refusals: [LinkRefusal] = []
    /// What the adapter had before, to put back (nil: nothing changed).
    package var previousConfiguration: SystemConfiguration?
    package var previousPHYs: ManagementPHYs?

    /// One line for a person: what was set, or what was not and the one command that would.
    package var summary: String {
        if refusals.isEmpty { return "link tuned: " + applied.joined(separator: ", ") }
        let missing = refusals.map(\.setting).joined(separator: " and ")
        if refusals.allSatisfy({ $0.limit == .privilege }) {
            return "link not tuned: \(missing) need CAP_NET_ADMIN; run `sudo bletransfer link tune` once after boot"
        }
        return "link: " + refusals.map { "\($0.setting): \($0.detail)" }.joined(separator: "; ")
    }
}

/// Sets an adapter's link defaults through the management channel (CAP_NET_ADMIN).
package enum AdapterTuning {
    /// Applies `target` to controller `index` setting by setting: one the process may not set or the controller lacks is
    /// reported, the others still made. With `remember`, the outcome keeps what was there for `restore`.
    package static func apply(_ target: AdapterLinkTarget, controller index: UInt16,
                              remember: Bool = false) async -> AdapterTuningOutcome {
        var outcome = AdapterTuningOutcome()
        await applyPHYs(target, controller: index, remember: remember, to: &outcome)
        await applyConfiguration(target, controller: index, remember: remember, to: &outcome)
        return outcome
    }

    package static func restore(_ outcome: AdapterTuningOutcome, controller index: UInt16) async {
        if let phys = outcome.previousPHYs {
            try? await AdapterLinkDefaults.selectPHYs(phys, controller: index)
        }
        if let configuration = outcome.previousConfiguration {
            try? await AdapterLinkDefaults.setSystemConfiguration(configuration, controller: index)
        }
    }

    private static func applyPHYs(_ target: AdapterLinkTarget, controller index: UInt16, remember: Bool,
                                  to outcome: inout AdapterTuningOutcome) async {
        do throws(ManagementError) {
            let configuration = try await AdapterLinkDefaults.phyConfiguration(controller: index)
            guard target.twoM else { return }
            guard configuration.offers2M else {
                outcome.refusals.append(LinkRefusal(setting: "2M PHY", limit: .controller,
                                                    detail: "the controller has no 2M PHY"))
                return
            }
            if configuration.uses2M { outcome.applied.append("2M PHY (already)"); return }
            try await AdapterLinkDefaults.selectPHYs(configuration.selected.union(.le2M), controller: index)
            if remember { outcome.previousPHYs = configuration.selected }
            outcome.applied.append("2M PHY")
        } catch {
            outcome.refusals.append(refusal("2M PHY", error))
        }
    }

    private static func applyConfiguration(_ target: AdapterLinkTarget, controller index: UInt16, remember: Bool,
                                           to outcome: inout AdapterTuningOutcome) async {
        let interval = "a \(milliseconds(target.connectionInterval.lowerBound))–"
            + "\(milliseconds(target.connectionInterval.upperBound)) ms interval"
        do throws(ManagementError) {
            let current = try await AdapterLinkDefaults.systemConfiguration(controller: index)
            if target.isMet(by: current) { outcome.applied.append("\(interval) (already)"); return }
            try await AdapterLinkDefaults.setSystemConfiguration(target.systemConfiguration, controller: index)
            if remember {
                var previous = SystemConfiguration()
                for parameter in target.systemConfiguration.values.keys { previous[parameter] = current[parameter] }
                outcome.previousConfiguration = previous
            }
            outcome.applied.append(interval)
        } catch {
            outcome.refusals.append(refusal(interval, error))
        }
    }

    private static func refusal(_ setting: String, _ error: ManagementError) -> LinkRefusal {
        if error.isPermissionDenied {
            return LinkRefusal(setting: setting, limit: .privilege, detail: "needs CAP_NET_ADMIN")
        }
        if case .refused(_, .notSupported) = error {
            return LinkRefusal(setting: setting, limit: .controller, detail: "the controller does not support it")
        }
        return LinkRefusal(setting: setting, limit: .configuration, detail: error.description)
    }

    /// "7.5", "15".
    package static func milliseconds(_ units: UInt16) -> String { LinkParameters.trimmed(Double(units) * 1.25) }
}
