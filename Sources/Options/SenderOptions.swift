import Roles
import Storage
import Transfer

/// The sender's options as `send` and `daemon --role sender` both take them, in the units a user types (seconds,
/// bytes; nil: the default). `validate()` is the one check of them and `configuration` the one mapping onto a
/// `PeripheralConfiguration`, so the two commands cannot drift apart.
package struct SenderOptions: Sendable {
    package var adapterName: String?
    package var serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService
    package var characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic
    /// `--name`: the local name to advertise.
    package var localName: String = PeripheralConfiguration.defaultLocalName
    /// Not `--no-acquire-notify`.
    package var offersAcquireNotify = true
    /// `--ack-timeout`, in seconds.
    package var acknowledgementTimeout: Double?
    /// `--unsubscribe-timeout`, in seconds.
    package var unsubscribeTimeout: Double?
    /// `--min-rate`, in bytes per second (0: no floor).
    package var minimumRate: Int?
    /// `--compat-delivery`.
    package var compatDelivery: CompatDelivery = .automatic
    /// `--value-size`, in bytes.
    package var valueSize: Int?
    package var secureMode: SecureModePolicy?
    package var usesL2CAP = true

    package init() {}

    /// Throws the first option no sender can take, naming it.
    package func validate() throws(InvalidOption) {
        do {
            _ = try AdvertisedName.validate(localName)
        } catch { throw InvalidOption("--name", "\(error)") }
        if let minimumRate { _ = try OptionValidation.count(minimumRate, option: "--min-rate", minimum: 0) }
        if let acknowledgementTimeout { _ = try OptionValidation.duration(acknowledgementTimeout, option: "--ack-timeout") }
        if let valueSize {
            _ = try OptionValidation.byteCount(valueSize, option: "--value-size", minimum: WireFormat.minimumValueLength,
                                               maximum: WireFormat.maximumValueLength)
        }
        if let unsubscribeTimeout { _ = try OptionValidation.duration(unsubscribeTimeout, option: "--unsubscribe-timeout") }
    }

    /// The peripheral's configuration with these options; call `validate()` first (a refused value stays the default).
    package var configuration: PeripheralConfiguration {
        var configuration = PeripheralConfiguration(
            adapterName: adapterName, serviceUUID: serviceUUID, characteristicUUID: characteristicUUID,
            localName: localName, offersAcquireNotify: offersAcquireNotify)
        configuration.compatDelivery = compatDelivery
        configuration.valueSizeLimit = valueSize
        if let limit = acknowledgementTimeout.flatMap({ try? OptionValidation.duration($0, option: "--ack-timeout") }) {
            configuration.acknowledgementTimeout = limit
        }
        if let limit = unsubscribeTimeout.flatMap({ try? OptionValidation.duration($0, option: "--unsubscribe-timeout") }) {
            configuration.unsubscribeTimeout = limit
        }
        if let minimumRate { configuration.minimumTransferRate = minimumRate }
        // Without keys of its own the run still encrypts, with a key made for it.
        configuration.secureMode = secureMode ?? .unauthenticated()
        if !usesL2CAP { configuration.channelTransport = nil }
        return configuration
    }
}
