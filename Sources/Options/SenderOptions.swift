import Machines
import Roles
import Storage
import Transfer

/// The sender's options as `send` and `daemon --role sender` both take them, in the units a
/// user types (seconds, bytes; nil: the default). `validate()` is the one check of them and
/// `configuration` the one mapping onto a `PeripheralConfiguration`, so the two commands
/// cannot drift apart.
public struct SenderOptions: Sendable {
    public var adapterName: String?
    public var serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService
    public var characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic
    /// `--name`: the local name to advertise.
    public var localName: String = PeripheralConfiguration.defaultLocalName
    /// Not `--no-acquire-notify`.
    public var offersAcquireNotify = true
    /// `--ack-timeout`, in seconds.
    public var acknowledgementTimeout: Double?
    /// `--unsubscribe-timeout`, in seconds.
    public var unsubscribeTimeout: Double?
    /// `--min-rate`, in bytes per second (0: no floor).
    public var minimumRate: Int?
    /// `--compat-delivery`.
    public var compatDelivery: CompatDelivery = .automatic
    /// `--value-size`, in bytes.
    public var valueSize: Int?
    /// The framed protocol's keys and policy (nil: none given; the run uses a key of its own,
    /// authenticating nobody).
    public var secureMode: SecureModePolicy?
    /// Not `--no-l2cap`.
    public var usesL2CAP = true

    /// Every option at its default; set the ones given.
    public init() {}

    /// Throws the first option no sender can take, naming it.
    public func validate() throws(InvalidOption) {
        do {
            _ = try AdvertisedName.validate(localName)
        } catch {
            throw InvalidOption("--name", "\(error)")
        }
        if let minimumRate { _ = try OptionValidation.count(minimumRate, option: "--min-rate", minimum: 0) }
        if let acknowledgementTimeout { _ = try OptionValidation.duration(acknowledgementTimeout, option: "--ack-timeout") }
        if let valueSize {
            _ = try OptionValidation.byteCount(valueSize, option: "--value-size", minimum: WireFormat.minimumValueLength,
                                               maximum: WireFormat.maximumValueLength)
        }
        if let unsubscribeTimeout { _ = try OptionValidation.duration(unsubscribeTimeout, option: "--unsubscribe-timeout") }
    }

    /// The peripheral's configuration with these options applied. Call `validate()` first: a
    /// value it would refuse is left at the configuration's default here.
    public var configuration: PeripheralConfiguration {
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
