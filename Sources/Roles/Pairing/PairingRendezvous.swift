import BlueZ
import BluetoothModel
import DaemonSupport
import Machines
import Transfer
import Trust

/// How two hosts running `bletransfer pair` find each other (docs/pairing.md): each listens on an LE credit-based L2CAP
/// channel, advertises the pairing service with a random token and the PSM in manufacturer data, and scans for it. The
/// larger token connects, the other accepts: the person types the same command on both.
package struct PairingRendezvous: Sendable {
    /// Company ID 0xFFFF: not assigned to any company, for tests and unregistered use.
    package static let manufacturerID: UInt16 = 0xFFFF
    static let tokenLength = 4
    /// Longest SDU either side sends (PairingExchange's messages are far shorter).
    static let receiveMTU = PairingExchange.maximumMessageLength
    /// How long a channel may take to say it is a pairing before it is closed.
    static let helloTimeout: Duration = .seconds(10)
    static let connectTimeout: Duration = .seconds(30)
    static let channelTimeout: Duration = .seconds(10)
    static let servicesTimeout: Duration = .seconds(15)

    package let session: BluetoothSession
    package let adapter: Adapter
    let transport: any ChannelTransport
    let token: [UInt8] = (0..<PairingRendezvous.tokenLength).map { _ in UInt8.random(in: 0...255) }
    let note: @Sendable (String) -> Void

    /// - Parameter note: one line for the person (progress and refusals).
    package init(session: BluetoothSession, adapter: Adapter, transport: any ChannelTransport = L2CAPChannels(),
                note: @escaping @Sendable (String) -> Void) {
        self.session = session
        self.adapter = adapter
        self.transport = transport
        self.note = note
    }

    /// Where the two hosts met: the channel, and which side of the exchange this host takes.
    package struct Meeting: Sendable {
        package let socket: NotificationSocket
        package let role: PairingExchange.Role
        /// The first message, already read from an accepted channel (the responder's input).
        package let firstMessage: [UInt8]?
        package let peerDescription: String
        package let peerAddress: BluetoothAddress?
    }

    /// Drops the link to the other host and BlueZ's record of it, unless it is bonded at the Bluetooth level (someone
    /// paired the adapters on purpose). Why: BlueZ resolved its GATT services over the pairing's link, and a device
    /// with resolved services keeps listing those instead of what it advertises, so a `receive` run right after the
    /// pairing would not recognise the other host's transfer service until the record expires.
    package func forget(_ meeting: Meeting) async {
        guard let address = meeting.peerAddress, let device = adapter.device(address: address) else { return }
        if device.properties?.paired == true {
            try? await device.disconnect()
            return
        }
        try? await adapter.removeDevice(device)
    }

    /// The adapter `name` names (nil: the first), as a one-line failure when there is none.
    package static func adapter(in session: BluetoothSession, named name: String?) throws -> Adapter {
        do {
            return try session.adapter(named: name)
        } catch { throw PeripheralFailure.classify(error) }
    }

    /// `meet()`, given up after `limit` (75, with what to do).
    package func meet(within limit: Duration) async throws -> Meeting {
        try await withTimeLimit(limit, onTimeout: {
            RoleFailure(.timedOut, "no other host running 'bletransfer pair' found within \(limit.components.seconds) s; "
                + "run it on both hosts at the same time, within range")
        }) {
            try await meet()
        }
    }

    /// Advertises, scans and listens until another host running `pair` is met; leaves nothing
    /// registered behind. Unbounded: `meet(within:)` or the caller's cancellation ends it.
    package func meet() async throws -> Meeting {
        guard let local = adapter.properties else {
            throw RoleFailure(.unavailable, "adapter \(adapter.name) went away")
        }
        guard local.powered else {
            throw RoleFailure(.unavailable, "adapter \(adapter.name) is powered off; turn it on: bluetoothctl power on")
        }
        let addressType = LEAddressType(bluez: local.addressType)
        let listener: any ChannelListener
        do {
            listener = try transport.listen(adapter: local.address, addressType: addressType, receiveMTU: Self.receiveMTU)
        } catch { throw RoleFailure(.unavailable, "cannot listen for the other host on an L2CAP channel: \(error)") }
        defer { listener.close() }
        guard (0x0080...0x00FF).contains(listener.psm) else {
            throw RoleFailure(.software, "the kernel gave PSM \(listener.psm), not an LE dynamic one")
        }
        let advertisement = LEAdvertisement(session: session, configuration: AdvertisementConfiguration(
            serviceUUIDs: [TransferUUIDs.pairingService.canonical],
            manufacturerData: [Self.manufacturerID: token + [UInt8(listener.psm)]]))
        // Whether the advertisement got registered: an error before is bluetoothd's refusal.
        var registered = false
        do {
            return try await advertisement.withRegistration(on: adapter) {
                registered = true
                do {
                    try await adapter.setDiscoveryFilter(uuids: [TransferUUIDs.pairingService.canonical], transport: .le)
                    try await adapter.startDiscovery()
                } catch { throw RoleFailure(.unavailable, "cannot scan on \(adapter.name): \(error)") }
                let found: Result<Meeting, any Error>
                do {
                    found = .success(try await race(listener: listener, local: local))
                } catch { found = .failure(error) }
                await stopDiscovery()
                return try found.get()
            }
        } catch where !registered && !(error is CancellationError) { throw PeripheralFailure.classify(error) }
    }

    /// Stops the scan, even when the task was cancelled (a failure changes nothing: our connection ends it anyway).
    private func stopDiscovery() async {
        let adapter = self.adapter
        await runOutsideCancellation { _ = try? await adapter.stopDiscovery() }
    }

    /// The first of: a channel accepted that opens a pairing, or a channel this host opened to
    /// a host with a smaller token. A second one found meanwhile is closed.
    private func race(listener: any ChannelListener, local: AdapterProperties) async throws -> Meeting {
        try await withThrowingTaskGroup(of: Meeting?.self) { group in
            group.addTask { try await acceptPairing(on: listener) }
            group.addTask { try await connectToPeer(local: local) }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                guard let found = next else { continue }
                group.cancelAll()
                while let other = await group.nextResult() {
                    if case .success(let extra?) = other { extra.socket.close() }
                }
                return found
            }
            throw RoleFailure(.unavailable, "bluetoothd or adapter \(adapter.name) went away while looking for the other host")
        }
    }

    private func acceptPairing(on listener: any ChannelListener) async throws -> Meeting? {
        while true {
            let channel = try await listener.accept()
            let first = try? await withTimeLimit(Self.helloTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
                try await channel.socket.receive()
            }
            if let first = first ?? nil, PairingExchange.isPairingHello(first) {
                return Meeting(socket: channel.socket, role: .responder, firstMessage: first,
                               peerDescription: describe(address: channel.peer), peerAddress: channel.peer)
            }
            note("closed a channel from \(describe(address: channel.peer)) that did not open a pairing")
            channel.socket.close()
        }
    }

    /// Connects to the first host advertising the pairing service with a smaller token; keeps
    /// looking when that fails. Returns nil when the sightings end (bluetoothd gone).
    private func connectToPeer(local: AdapterProperties) async throws -> Meeting? {
        var waitingFor = Set<BluetoothAddress>()
        // Not filtered by the advertised UUID here: once BlueZ has resolved a device's GATT
        // services (an earlier pairing connected them), its UUIDs property lists those and no
        // longer what it advertises. The discovery filter still asks for the pairing service;
        // the manufacturer data, updated on every advertisement, says what a host offers now.
        for await sighting in adapter.sightings(serviceUUID: nil) {
            try Task.checkCancellation()
            guard let remote = sighting.device.properties,
                  let data = remote.manufacturerData[Self.manufacturerID], data.count == Self.tokenLength + 1
            else { continue }
            let theirToken = Array(data.prefix(Self.tokenLength))
            let psm = UInt16(data[Self.tokenLength])
            guard theirToken != token, psm >= 0x80 else { continue }
            let peer = describe(address: remote.address, name: remote.displayName)
            guard theirToken.lexicographicallyPrecedes(token) else {
                // The other host connects; this one only says once that it saw it.
                if waitingFor.insert(remote.address).inserted { note("found \(peer); waiting for it to connect") }
                continue
            }
            note("found \(peer); connecting")
            try? await adapter.stopDiscovery()
            let device = sighting.device
            do {
                try await withTimeLimit(Self.connectTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
                    try await device.connect(attempts: 3)
                    // bluetoothd opens its own channels on a new link (GATT discovery, Enhanced ATT); a channel
                    // opened while those are being set up was seen to have its replies sent on one of theirs (Linux
                    // 6.1). Wait until bluetoothd is done, as a transfer's central does before it opens its channel.
                    try? await device.waitUntilServicesResolved(timeout: Self.servicesTimeout)
                }
                let transport = self.transport
                let socket = try await withTimeLimit(Self.channelTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
                    try await transport.connect(adapter: local.address, addressType: LEAddressType(bluez: local.addressType),
                                                to: remote.address, peerType: LEAddressType(bluez: remote.addressType),
                                                psm: psm, receiveMTU: Self.receiveMTU)
                }
                return Meeting(socket: socket, role: .initiator, firstMessage: nil, peerDescription: peer,
                               peerAddress: remote.address)
            } catch {
                try Task.checkCancellation()
                note("could not reach \(peer) (\(error)); still looking")
                try? await device.disconnect()
                try? await adapter.startDiscovery()
            }
        }
        return nil
    }

    private func describe(address: BluetoothAddress?, name: String? = nil) -> String {
        guard let address else { return "a host" }
        if let name, name != address.description, !name.isEmpty { return "\(name) (\(address))" }
        return "\(address)"
    }
}
