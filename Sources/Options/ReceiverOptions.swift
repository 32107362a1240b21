import Roles
import Storage
import Transfer

/// The receiver's options as `receive` and `daemon --role receiver` both take them, in the units a user types (seconds,
/// bytes; nil: the default). `validate()` is the one check of them, `configuration(messageCount:stopOnCorruptMessage:)`
/// and `storageLimits` the one mapping, so the two commands cannot drift apart.
package struct ReceiverOptions: Sendable {
    package var adapterName: String?
    package var serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService
    package var characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic
    /// `--min-rssi`, in dBm.
    package var minimumRSSI: Int?
    /// `--max-size`, in bytes.
    package var maximumSize: Int?
    /// `--idle-timeout`, in seconds.
    package var idleTimeout: Double?
    /// Not `--compat`: ask bletransfer peripherals for the framed format.
    package var requestFramed = true
    /// `--min-rate`, in bytes per second (0: no floor).
    package var minimumRate: Int?
    /// `--reserve`, `--quota-bytes`, `--quota-files` (directory output only).
    package var reserve: Int?
    package var quotaBytes: Int?
    package var quotaFiles: Int?
    package var secureMode: SecureModePolicy?
    package var usesL2CAP = true

    /// `--idle-timeout`'s default.
    package static let defaultIdleTimeout: Duration = .seconds(15)

    package init() {}

    /// Whether any storage bound (`--reserve`, `--quota-bytes`, `--quota-files`) was given.
    package var isStorageSet: Bool { reserve != nil || quotaBytes != nil || quotaFiles != nil }

    /// Throws the first option no receiver can take, naming it.
    package func validate() throws(InvalidOption) {
        if let minimumRSSI { _ = try OptionValidation.signalStrength(minimumRSSI, option: "--min-rssi") }
        if let maximumSize { _ = try OptionValidation.maximumMessageSizeOption(maximumSize) }
        if let idleTimeout { _ = try OptionValidation.duration(idleTimeout, option: "--idle-timeout") }
        if let minimumRate { _ = try OptionValidation.count(minimumRate, option: "--min-rate", minimum: 0) }
        if let reserve { _ = try OptionValidation.byteCount(reserve, option: "--reserve", minimum: 0, maximum: 1 << 50) }
        if let quotaBytes { _ = try OptionValidation.byteCount(quotaBytes, option: "--quota-bytes", maximum: 1 << 50) }
        if let quotaFiles { _ = try OptionValidation.count(quotaFiles, option: "--quota-files") }
    }

    /// The message size limits `--max-size` sets: that many bytes on disk (a directory
    /// receiver's framed messages), and in memory no more than this machine can hold.
    package var limits: TransferLimits {
        guard let maximumSize else { return .default }
        return TransferLimits(maximumMessageSize: min(maximumSize, OptionValidation.maximumMessageSize()),
                              maximumStoredMessageSize: maximumSize)
    }

    /// The storage bounds of directory output.
    package var storageLimits: StorageLimits {
        StorageLimits(reserveBytes: reserve ?? StorageLimits.defaultReserveBytes, quotaBytes: quotaBytes, quotaFiles: quotaFiles)
    }

    /// The central's configuration with these options; call `validate()` first (a refused value stays the default).
    package func configuration(messageCount: Int?, stopOnCorruptMessage: Bool) -> CentralConfiguration {
        let idle = idleTimeout.flatMap { try? OptionValidation.duration($0, option: "--idle-timeout") }
        var configuration = CentralConfiguration(
            adapterName: adapterName, serviceUUID: serviceUUID, characteristicUUID: characteristicUUID,
            messageCount: messageCount, minimumRSSI: minimumRSSI, limits: limits, requestFramed: requestFramed,
            idleTimeout: idle ?? Self.defaultIdleTimeout,
            minimumRate: minimumRate ?? CentralConfiguration.defaultMinimumRate,
            stopOnCorruptMessage: stopOnCorruptMessage)
        // Without keys of its own the run still encrypts, with a key made for it.
        configuration.secureMode = secureMode ?? .unauthenticated()
        if !usesL2CAP { configuration.channelTransport = nil }
        return configuration
    }
}
