import BlueZ
import Machines
import Storage
import Transfer

package struct CentralConfiguration: Sendable {
    /// "hci1", or nil for BlueZ's first adapter.
    package var adapterName: String?
    package var serviceUUID: BluetoothUUID
    package var characteristicUUID: BluetoothUUID
    /// Messages to receive before `run` returns; nil keeps receiving until cancelled.
    package var messageCount: Int?
    /// With `messageCount` nil: `run` returns after the first visit that stored a message, however it ended (the
    /// sender closed the session, or the link after its last message), so `receive --output-dir` takes one `send`
    /// session's files and stops. A visit cut after some of them leaves the rest with the sender, for the next run.
    package var endsWithSendersSession = false
    /// On-disk memory of stored messages whose ACK may not have reached their sender (``ReceiptJournal``): a message
    /// sent again after this process was killed or restarted is acknowledged, not stored twice. Directory outputs only.
    package var receiptJournal: ReceiptJournal?
    /// Advertisements weaker than this (dBm) are ignored; nil accepts any strength.
    package var minimumRSSI: Int?
    package var limits: TransferLimits
    /// Write a HELLO before subscribing when the characteristic takes writes, asking a
    /// bletransfer peripheral for the framed format. Off: behave exactly like Apple's sample.
    package var requestFramed: Bool
    /// A transfer with no notification for this long is abandoned (nothing kept) and retried:
    /// a peripheral that never sends `EOM` must not hold the central forever.
    package var idleTimeout: Duration
    /// The slowest transfer kept, in payload bytes/s from the subscription once `rateGrace` passed (0: none). Every
    /// value resets the idle timer but none resets this bound, so a peer trickling bytes cannot hold the central.
    package var minimumRate: Int
    package var rateGrace: Duration
    /// How long one `Device1.Connect` may take.
    package var connectTimeout: Duration
    /// `Device1.Connect` attempts per peer visit (transient failures only).
    package var connectAttempts = 4
    /// How long to wait for `ServicesResolved` after connecting.
    package var servicesResolveTimeout: Duration
    /// How long a service missing once the services resolved may take to appear (a Service
    /// Changed after the discovery; see `Device.characteristic(service:characteristic:appearingWithin:)`).
    package var serviceAppearanceGrace: Duration = .seconds(2)
    /// Pauses between retries of one peer and of the scan; grows per consecutive failure.
    package var backoff: BackoffPolicy
    /// Whether a message that fails verification (digest, length, framing, size limit) ends the run with a
    /// `.dataError` failure (a command's exit status 65) or is reported and skipped (a daemon keeps receiving).
    package var stopOnCorruptMessage: Bool
    /// How long the link stays up after an ACK sent as a write command (no completion exists) before disconnecting.
    package var acknowledgementSettle: Duration = .milliseconds(300)
    /// The framed protocol's keys (it is always encrypted). With `requiresSecure`, a peer that does not complete it
    /// gets nothing and nothing of it is stored.
    package var secureMode: SecureModePolicy = .unauthenticated()
    /// Where unfinished secure messages keep checkpoints for the next visit (docs/wire-v2.md §5); nil: no `resume`.
    package var resumeSpool: ResumeSpool?
    /// After the last wanted message: the most the run waits for `RemoveDevice` to be on the bus (bluetoothd finishes
    /// the disconnection and the removal on its own; well under a millisecond unless the bus stalls).
    package var handBackWait: Duration = .milliseconds(100)
    /// A scan that has chosen nothing is restarted this often (StopDiscovery, StartDiscovery): the kernel can drop a
    /// scan's first report and a controller's duplicate filter then hides the device for the rest of that scan.
    package var scanRestartInterval: Duration = .seconds(4)
    /// Where framed version 2 may use an L2CAP channel the sender publishes (`channel`); nil (`--no-l2cap`): GATT only.
    package var channelTransport: (any ChannelTransport)? = L2CAPChannels()
    /// How long opening that channel may take before the visit goes on over GATT.
    package var channelConnectTimeout: Duration = .seconds(5)
    /// After a visit's last ACK on a channel, how long to wait for the sender to close it, which confirms the ACK (a
    /// message with an unconfirmed ACK is remembered: sent again, it is acknowledged, not stored twice).
    package var channelCloseWait: Duration = .seconds(2)
    /// The kernel's queue on a notification socket, read once (the run warns when it is small).
    package var notificationQueue: NotificationQueueLimit = .current()
    /// Whether the link to a peer ("AA:BB:…") may carry several ATT bearers, which can reorder
    /// a compat message (Apple's flow has no sequence numbers). Replaceable for tests.
    package var linkExposure: @Sendable (_ address: String) -> EnhancedATTExposure = { GATTBearers.exposure(to: $0) }

    /// Default `--min-rate`: 128 bytes/s, a twentieth of the slowest link measured in the lab.
    package static let defaultMinimumRate = 128
    /// How long before `minimumRate` applies: set-up, MTU exchange and first values take seconds on a slow link.
    package static let defaultRateGrace: Duration = .seconds(20)

    package init(adapterName: String? = nil,
                serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService,
                characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic, messageCount: Int? = 1,
                minimumRSSI: Int? = nil, limits: TransferLimits = .default, requestFramed: Bool = true,
                idleTimeout: Duration = .seconds(15), minimumRate: Int = CentralConfiguration.defaultMinimumRate,
                rateGrace: Duration = CentralConfiguration.defaultRateGrace, connectTimeout: Duration = .seconds(20),
                servicesResolveTimeout: Duration = .seconds(20), backoff: BackoffPolicy = BackoffPolicy(),
                stopOnCorruptMessage: Bool = true) {
        self.adapterName = adapterName
        self.serviceUUID = serviceUUID
        self.characteristicUUID = characteristicUUID
        self.messageCount = messageCount
        self.minimumRSSI = minimumRSSI
        self.limits = limits
        self.requestFramed = requestFramed
        self.idleTimeout = idleTimeout
        self.minimumRate = minimumRate
        self.rateGrace = rateGrace
        self.connectTimeout = connectTimeout
        self.servicesResolveTimeout = servicesResolveTimeout
        self.backoff = backoff
        self.stopOnCorruptMessage = stopOnCorruptMessage
    }
}
