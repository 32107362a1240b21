/// The LE PHYs of the management channel's PHY configuration (doc/mgmt-api.txt; BR/EDR bits are kept as they are).
package struct ManagementPHYs: OptionSet, Sendable, Hashable {
    package let rawValue: UInt32
    package init(rawValue: UInt32) { self.rawValue = rawValue }

    package static let le2MTransmit = ManagementPHYs(rawValue: 1 << 11)
    package static let le2MReceive = ManagementPHYs(rawValue: 1 << 12)

    package static let le2M: ManagementPHYs = [.le2MTransmit, .le2MReceive]
}

/// A controller's PHYs: those it has, those the host may choose, those chosen (for the LE Set Default PHY the kernel
/// sends, hence for every new connection).
package struct PHYConfiguration: Sendable, Hashable {
    package var supported: ManagementPHYs
    package var configurable: ManagementPHYs
    package var selected: ManagementPHYs

    /// From Get PHY Configuration's return parameters.
    package init?(parameters: [UInt8]) {
        guard parameters.count >= 12 else { return nil }
        supported = ManagementPHYs(rawValue: UInt32(littleEndianBytes: parameters[0..<4]))
        configurable = ManagementPHYs(rawValue: UInt32(littleEndianBytes: parameters[4..<8]))
        selected = ManagementPHYs(rawValue: UInt32(littleEndianBytes: parameters[8..<12]))
    }

    package var uses2M: Bool { selected.isSuperset(of: .le2M) }
    package var offers2M: Bool { supported.isSuperset(of: .le2M) && configurable.isSuperset(of: .le2M) }
}

/// The kernel's defaults for new LE connections and advertising (doc/mgmt-api.txt, "Read Default System Configuration
/// Command"), in HCI's units.
package enum SystemParameter: UInt16, Sendable, Hashable, CaseIterable {
    case advertisingMinInterval = 0x000A  // 0.625 ms units
    case advertisingMaxInterval = 0x000B
    /// 1.25 ms units: what the host asks for when it connects as central, and the range a peripheral asks its central
    /// to move into when the link's interval is outside it.
    case connectionMinInterval = 0x0017
    case connectionMaxInterval = 0x0018
    /// Connection events the peripheral may skip when it has nothing to send.
    case connectionLatency = 0x0019
    case supervisionTimeout = 0x001A  // 10 ms units
}

/// Parameter values keyed by parameter, as the channel's type-length-value list carries them.
package struct SystemConfiguration: Sendable, Hashable {
    package var values: [SystemParameter: UInt16]

    package init(_ values: [SystemParameter: UInt16] = [:]) { self.values = values }

    package subscript(_ parameter: SystemParameter) -> UInt16? {
        get { values[parameter] }
        set { values[parameter] = newValue }
    }

    /// From Read Default System Configuration's return parameters (unknown types skipped; a list running past its end
    /// yields what came before).
    package init(parameters: [UInt8]) {
        var values: [SystemParameter: UInt16] = [:]
        var index = 0
        while index + 3 <= parameters.count {
            let type = UInt16(littleEndianBytes: parameters[index..<(index + 2)])
            let length = Int(parameters[index + 2])
            let start = index + 3
            guard start + length <= parameters.count else { break }
            if let parameter = SystemParameter(rawValue: type), length == 2 {
                values[parameter] = UInt16(littleEndianBytes: parameters[start..<(start + 2)])
            }
            index = start + length
        }
        self.values = values
    }

    /// The list Set Default System Configuration takes, in a fixed order.
    package var encoded: [UInt8] {
        var bytes: [UInt8] = []
        for parameter in SystemParameter.allCases {
            guard let value = values[parameter] else { continue }
            bytes.appendLittleEndian(parameter.rawValue)
            bytes.append(2)
            bytes.appendLittleEndian(value)
        }
        return bytes
    }
}

package enum AdapterLinkDefaults {
    /// Needs CAP_NET_ADMIN (the kernel keeps it from untrusted sockets).
    package static func phyConfiguration(controller: UInt16) async throws(ManagementError) -> PHYConfiguration {
        let command = ManagementCommand(code: 0x0044, controller: controller, name: "Get PHY Configuration")
        let reply = try await ManagementChannel.run(command)
        guard let configuration = PHYConfiguration(parameters: reply.parameters) else {
            throw .malformed(command: command.name)
        }
        return configuration
    }

    /// Selects `phys` as the default PHYs (the kernel sends LE Set Default PHY). Needs CAP_NET_ADMIN.
    package static func selectPHYs(_ phys: ManagementPHYs, controller: UInt16) async throws(ManagementError) {
        var parameters: [UInt8] = []
        parameters.appendLittleEndian(phys.rawValue)
        _ = try await ManagementChannel.run(ManagementCommand(
            code: 0x0045, controller: controller, parameters: parameters, name: "Set PHY Configuration"))
    }

    /// The kernel's defaults for new connections and advertising. Needs no privilege.
    package static func systemConfiguration(controller: UInt16) async throws(ManagementError) -> SystemConfiguration {
        let reply = try await ManagementChannel.run(ManagementCommand(
            code: 0x004B, controller: controller, name: "Read Default System Configuration"))
        return SystemConfiguration(parameters: reply.parameters)
    }

    /// Sets the given defaults (all or none, as the kernel takes the list). Needs CAP_NET_ADMIN.
    package static func setSystemConfiguration(_ configuration: SystemConfiguration,
                                               controller: UInt16) async throws(ManagementError) {
        _ = try await ManagementChannel.run(ManagementCommand(
            code: 0x004C, controller: controller, parameters: configuration.encoded,
            name: "Set Default System Configuration"))
    }
}
