import Transfer

/// What a `Peripheral` serves and how.
public struct PeripheralConfiguration: Sendable {
    /// The adapter to use ("hci1"); nil: the first adapter BlueZ reports.
    public var adapterName: String?
    public var serviceUUID: BluetoothUUID
    public var characteristicUUID: BluetoothUUID
    /// Put in the advertisement (BlueZ places it in the scan response). Validated with
    /// `AdvertisedName.validate(_:)`; nil advertises no name.
    public var localName: String?
    /// Offer `AcquireNotify` (export `NotifyAcquired`), so BlueZ hands over a socket with
    /// back-pressure. false leaves only `StartNotify` + `PropertiesChanged` (the fallback).
    public var offersAcquireNotify: Bool
    /// Stop advertising while a central is being served, so a second central does not join a
    /// stream halfway (BlueZ 5.66 keeps one notify session per characteristic and sends every
    /// notification to every subscriber); advertise again once the subscription ends.
    public var pausesAdvertisingWhileServing: Bool
    /// How long a framed transfer whose central hung up right after `EOM` still waits for its
    /// ACK: the write and the unsubscription travel different ways (a D-Bus method call and a
    /// socket hang-up) and may reach us in either order.
    public var acknowledgementGrace: Duration
    /// How long after a compat central left (after `EOM` was written) the delivery is
    /// confirmed: the hang-up of the notification socket looks the same whether the central
    /// unsubscribed or the link went down with the adapter, and the state change that tells
    /// them apart arrives a moment later. Zero counts at once.
    public var compatConfirmationDelay: Duration
    /// The pause between two `PropertiesChanged` notifications on the fallback path, which
    /// has no back-pressure at all: without a pause a large message would queue in
    /// bluetoothd's memory as fast as D-Bus carries it.
    public var fallbackValueInterval: Duration
    /// How long a HELLO stays valid for the device that wrote it.
    public var helloLifetime: Duration
    /// How many devices' HELLOs are remembered at most (the oldest is forgotten first), so a
    /// hostile central cannot grow the table.
    public var helloCapacity: Int
    /// How often, at most, a `.progress` event is emitted during a transfer.
    public var progressInterval: Duration

    public init(adapterName: String? = nil,
                serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService,
                characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic,
                localName: String? = PeripheralConfiguration.defaultLocalName,
                offersAcquireNotify: Bool = true,
                pausesAdvertisingWhileServing: Bool = true,
                acknowledgementGrace: Duration = .seconds(3),
                compatConfirmationDelay: Duration = .milliseconds(1500),
                fallbackValueInterval: Duration = .milliseconds(2),
                helloLifetime: Duration = .seconds(60),
                helloCapacity: Int = 16,
                progressInterval: Duration = .milliseconds(200)) {
        self.adapterName = adapterName
        self.serviceUUID = serviceUUID
        self.characteristicUUID = characteristicUUID
        self.localName = localName
        self.offersAcquireNotify = offersAcquireNotify
        self.pausesAdvertisingWhileServing = pausesAdvertisingWhileServing
        self.acknowledgementGrace = acknowledgementGrace
        self.compatConfirmationDelay = compatConfirmationDelay
        self.fallbackValueInterval = fallbackValueInterval
        self.helloLifetime = helloLifetime
        self.helloCapacity = helloCapacity
        self.progressInterval = progressInterval
    }

    public static let defaultLocalName = "bletransfer"
}
