import BlueZ
import Machines
import Storage
import Transfer

package struct PeripheralConfiguration: Sendable {
    /// The adapter to use ("hci1"); nil: the first adapter BlueZ reports.
    package var adapterName: String?
    package var serviceUUID: BluetoothUUID
    package var characteristicUUID: BluetoothUUID
    /// Advertised (BlueZ puts it in the scan response); validated with `AdvertisedName.validate(_:)`; nil: no name.
    package var localName: String?
    /// Offer `AcquireNotify` (export `NotifyAcquired`): BlueZ hands over a socket with back-pressure. false leaves
    /// only `StartNotify` + `PropertiesChanged` (the fallback).
    package var offersAcquireNotify: Bool
    /// Stop advertising while a central is served, so a second one does not join a stream halfway (BlueZ 5.66 keeps
    /// one notify session per characteristic, every notification to every subscriber); resume when it ends.
    package var pausesAdvertisingWhileServing = true
    /// How long a framed transfer whose central hung up right after `EOM` still waits for its ACK: the write and the
    /// unsubscription travel different ways (a D-Bus method call, a socket hang-up) and may arrive in either order.
    package var acknowledgementGrace: Duration
    /// How long after a compat central left (after `EOM` was written) the delivery is confirmed: the hang-up of the
    /// notification socket looks the same whether the central unsubscribed or the link went down with the adapter,
    /// and the state change that tells them apart arrives a moment later. Zero counts at once.
    package var compatConfirmationDelay: Duration
    /// The pause between two `PropertiesChanged` notifications on the fallback path, which has no back-pressure at
    /// all: without a pause a large message would queue in bluetoothd's memory as fast as D-Bus carries it.
    package var fallbackValueInterval: Duration
    package var helloLifetime: Duration = .seconds(60)
    /// The most devices' HELLOs remembered (oldest forgotten first), so a hostile central cannot grow the table.
    package var helloCapacity = 16
    /// How often, at most, a `.progress` event is emitted during a transfer.
    package var progressInterval: Duration = .milliseconds(200)
    /// How long a framed central has after `EOM` to ACK before it is dropped and advertising resumes (`--ack-timeout`).
    package var acknowledgementTimeout: Duration
    /// How long a compat central has after `EOM` was written to unsubscribe (and a framed one after its ACK); then it
    /// is dropped and the message is not counted. `send --unsubscribe-timeout`.
    package var unsubscribeTimeout: Duration
    /// The slowest a subscriber may take a message, in bytes/s: a central subscribed but not reading (no credits or
    /// link-layer ACKs) holds the sender ≤ `transferTimeFloor` plus the message at this rate; 0: none. `--min-rate`.
    package var minimumTransferRate: Int
    /// Added to every subscription's deadline (connection set-up, the first values).
    package var transferTimeFloor: Duration
    /// Notifications or confirmed indications for Apple-flow centrals (`send --compat-delivery`); with indications on
    /// Apple's characteristic, a second one (`TransferUUIDs.framedCharacteristic`) notifies bletransfer centrals.
    package var compatDelivery: CompatDelivery
    /// The longest value sent, below the link's (ATT MTU − 3; nil: that); Apple's sends 20 bytes. `send --value-size`.
    package var valueSizeLimit: Int?
    /// Keys and policy of the framed protocol, always encrypted: by default a key made for this run that lets in any
    /// central's key (not authenticated). With `requiresSecure`, a central not completing it (Apple's) gets nothing.
    package var secureMode: SecureModePolicy = .unauthenticated()
    /// The fairness rule of a framed session (docs/wire-v2.md, section 4; `SessionShare`): a central served this many
    /// messages in one session gets CLOSE after the last, and the next central in range has its turn ...
    package var sessionMessageLimit: Int = PeripheralConfiguration.defaultSessionMessageLimit
    /// ... as after this many payload bytes, or at once when another central was turned away.
    package var sessionByteLimit: Int = PeripheralConfiguration.defaultSessionByteLimit
    /// Where framed version 2 may run over an L2CAP channel (`channel`): the sender listens on a dynamic PSM and
    /// publishes it in the service. nil (`--no-l2cap`), or a kernel without Bluetooth sockets: GATT notifications only.
    package var channelTransport: (any ChannelTransport)? = L2CAPChannels()
    /// A central that opened the channel must write its HELLO within this, or the channel is closed with one line
    /// naming it (up to `Peripheral.channelsAwaitingHello` are read at once).
    package var channelHelloTimeout: Duration = .seconds(5)
    /// How long a central that wrote a HELLO has to answer the handshake's first message. Nobody is authenticated
    /// before that: a silent central must not hold the sender for the transfer deadline (an hour for a large file).
    package var handshakeTimeout: Duration = .seconds(10)

    /// `send --min-rate`'s default, in bytes per second.
    package static let defaultMinimumTransferRate = 256

    package init(adapterName: String? = nil,
                serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService,
                characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic,
                localName: String? = PeripheralConfiguration.defaultLocalName, offersAcquireNotify: Bool = true,
                acknowledgementGrace: Duration = .seconds(3), compatConfirmationDelay: Duration = .milliseconds(1500),
                fallbackValueInterval: Duration = .milliseconds(2),
                acknowledgementTimeout: Duration = .seconds(20), unsubscribeTimeout: Duration = .seconds(20),
                minimumTransferRate: Int = PeripheralConfiguration.defaultMinimumTransferRate,
                transferTimeFloor: Duration = .seconds(60), compatDelivery: CompatDelivery = .notifications,
                valueSizeLimit: Int? = nil) {
        self.adapterName = adapterName
        self.serviceUUID = serviceUUID
        self.characteristicUUID = characteristicUUID
        self.localName = localName
        self.offersAcquireNotify = offersAcquireNotify
        self.acknowledgementGrace = acknowledgementGrace
        self.compatConfirmationDelay = compatConfirmationDelay
        self.fallbackValueInterval = fallbackValueInterval
        self.acknowledgementTimeout = acknowledgementTimeout
        self.unsubscribeTimeout = unsubscribeTimeout
        self.minimumTransferRate = minimumTransferRate
        self.transferTimeFloor = transferTimeFloor
        self.compatDelivery = compatDelivery
        self.valueSizeLimit = valueSizeLimit
    }

    package static let defaultLocalName = "bletransfer"
    /// Framed-session fairness: at most 256 messages or 4 MiB keep a newly arrived central waiting, at any speed.
    package static let defaultSessionMessageLimit = 256
    package static let defaultSessionByteLimit = 4 << 20
}
