import BlueZ
import DaemonSupport
import Machines
import Storage
import Transfer
import Trust

/// One visit: connect, find the transfer characteristic (and the sender's L2CAP channel),
/// offer the framed protocol, subscribe, receive (`receive`), clean up in Apple's order.
extension Central {
    /// Connect, resolve, subscribe, receive one message, store it, acknowledge, unsubscribe, disconnect. Throws
    /// ``TransferFailure`` for what a later visit may fix (or a corrupt message); ``ClassifiedFailure``: the run ends.
    func visit(_ device: Device, peer: PeerDescription, adapter: Adapter, sink: any MessageSink) async throws {
        var channel: CharacteristicSubscription?
        progressState.beginVisit()
        // Room for nothing at all (the reserve alone is broken, a quota full): do not even
        // connect. The message's own length is checked once the sender announces it.
        if let refusal = sink.admissionRefusal(byteCount: 0) {
            throw TransferFailure.refused(bound: refusal.bound.rawValue, reason: refusal.reason)
        }
        do {
            try await connect(device, peer: peer)
            emit(.connected(peer))
            let characteristic: RemoteGATTCharacteristic
            (characteristic, channel) = try await transferCharacteristicAndChannel(on: device, adapter: adapter, peer: peer)
            let policy = configuration.secureMode
            let secureSession = try await offerFramed(on: characteristic, channel: channel, peer: peer, sink: sink)

            do {
                let state = progressState
                if channel == nil {
                    channel = try await CharacteristicSubscription.subscribe(to: characteristic) { [weak self] text in
                        // Peers without AcquireNotify (Apple's sample, bless) are normal: say it once.
                        if state.fallbackNotice.first() { self?.emit(.warning(text)) }
                    }
                }
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                throw TransferFailure.transient("subscribing failed: \(error)")
            }
            guard let channel else { throw TransferFailure.transient("subscribing failed") }

            let link = VisitLink(subscription: channel, device: device, characteristic: characteristic, peer: peer)
            try await receive(over: link, secureSession: secureSession, requiresSecure: policy.requiresSecure,
                              sink: sink)
        } catch let failure as TransferFailure {
            // A refusal (a bound of ours, the sender's key or format) says nothing against the
            // channel: the next visit may open it at once again.
            if !failure.isRefusal { progressState.forgetChannel(of: peer.address) }
            // A refusal gets its own event (one line) from the caller.
            if channel != nil, !failure.isRefusal { emit(.transferAborted(peer, reason: failure.description)) }
            await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer)
            throw failure
        } catch {
            progressState.forgetChannel(of: peer.address)
            if channel != nil {
                let stopped = Task.isCancelled || error is StopRequested
                emit(.transferAborted(peer, reason: stopped ? "stopped" : Self.describe(error)))
            }
            await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer)
            throw error
        }
        // Forgotten after a success too: BlueZ then reports the peer again only when it really advertises again (a
        // fresh InterfacesAdded), instead of offering a cached entry of a sender that may have finished and left.
        let lastWanted = configuration.messageCount.map { progressState.receivedSnapshot >= $0 } ?? false
        await cleanUp(channel: channel, device: device, adapter: adapter, peer: peer, handingBack: lastWanted)
    }

    /// Asks for the framed protocol when the run wants it and the peer takes writes: writes a HELLO offering the
    /// encrypted session (over the channel when there is one) and returns the session that will answer. A peer that
    /// takes no HELLO is left to Apple's flow, unless the policy requires the secure mode: then it is refused.
    func offerFramed(on characteristic: RemoteGATTCharacteristic, channel: CharacteristicSubscription?,
                     peer: PeerDescription, sink: any MessageSink) async throws -> SecureReceiverSession? {
        var secureSession: SecureReceiverSession?
        let policy = configuration.secureMode
        let overChannel = channel?.overChannel ?? false
        let helloWriteType: GATTWriteType? = overChannel ? .command : Self.writeType(for: characteristic.flags)
        if configuration.requestFramed, let writeType = helloWriteType {
            // The framed protocol's HELLO, always offering the encrypted session; a sender that answers anything but
            // a secure stream or Apple's flow is refused. `resume` only with a spool to keep checkpoints in.
            let spool = configuration.resumeSpool
            var offered: Capabilities = [.secure, .meta, .multi, .pipeline, .window]
            if spool != nil { offered.insert(.resume) }
            if overChannel { offered.insert(.channel) }
            let helloV2 = HelloV2(session: UInt64.random(in: .min ... .max), offered: offered)
            do {
                if let channel, overChannel {
                    try await channel.write(helloV2.encoded, type: writeType)
                } else { try await characteristic.writeValue(helloV2.encoded, type: writeType) }
                let maximumWriteLength = overChannel ? (channel?.mtu ?? 23) : max(20, (characteristic.mtu ?? 23) - 3)
                secureSession = SecureReceiverSession(
                    identity: policy.identity, authorizedPeers: policy.authorizedPeers, hello: helloV2,
                    maximumPayloadLength: configuration.limits.maximumPayload(onDisk: sink.partialPayloadStore != nil),
                    maximumWriteLength: maximumWriteLength)
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                emit(.warning("could not ask \(EventText.describe(peer)) for the framed format (\(error)); expecting compat"))
            }
        }
        if policy.requiresSecure && secureSession == nil {
            throw TransferFailure.refused(
                bound: "authorized-peers",
                reason: "it offers no way to start the secure mode (no writable transfer characteristic); nothing kept")
        }
        return secureSession
    }

    /// `Device1.Connect`, retrying transient failures with back-off.
    func connect(_ device: Device, peer: PeerDescription) async throws {
        let attempts = max(1, configuration.connectAttempts)
        for attempt in 1...attempts {
            emit(.connecting(peer, attempt: attempt))
            do {
                try await device.connectOnce(timeout: configuration.connectTimeout)
                return
            } catch let error as BluetoothError {
                try Self.rethrowIfFatal(error)
                // After a call that timed out, bluetoothd may still be trying (the next Connect would get "Operation
                // already in progress" for as long as it does; seen after the peer's adapter was power-cycled
                // mid-connect), and after "in progress" it certainly is. Disconnect cancels a pending Connect
                // (device-api.txt); on a device that is neither connected nor connecting it does nothing.
                await boundedCleanup(limit: .seconds(5)) { try? await device.disconnect() }
                guard error.isTransientConnectFailure, attempt < attempts else {
                    throw TransferFailure.transient("connecting failed: \(error)")
                }
                let delay = configuration.backoff.delay(afterFailures: attempt)
                emit(.retrying(reason: "connecting to \(EventText.describe(peer)) failed: \(error)", delay: delay))
                try await Task.sleep(for: delay)
            }
        }
    }

    func resolveCharacteristic(on device: Device) async throws -> RemoteGATTCharacteristic {
        do {
            try await device.waitUntilServicesResolved(timeout: configuration.servicesResolveTimeout)
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            switch error {
            case .timedOut:
                throw TransferFailure.transient(
                    "services did not resolve within \(MessageAssembly.describe(configuration.servicesResolveTimeout))")
            default: throw TransferFailure.transient("waiting for services failed: \(error)")
            }
        }
        let service = configuration.serviceUUID.canonical
        let apple = configuration.characteristicUUID.canonical
        do {
            // On a fast link the discovery can finish before a sender's GATT database settled (lab: the radio at 15
            // ms, peers-addressing): a Service Changed brings the service a few connection events later.
            let found = try await device.characteristic(service: service, characteristic: apple,
                                                        appearingWithin: configuration.serviceAppearanceGrace)
            // A bletransfer sender whose Apple characteristic carries indications serves its
            // own notifying characteristic beside it; framed transfers go there at full speed.
            return (try? device.characteristic(service: service,
                                               characteristic: TransferUUIDs.framedCharacteristic.canonical)) ?? found
        } catch let error as BluetoothError { throw TransferFailure.unsuitable("\(error)") }
    }

    /// Apple's `cleanup()` order: unsubscribe, then disconnect. The device is also removed from BlueZ's cache (unless
    /// paired), after a success too, so the next scan sees it only when it really advertises again, not a cached
    /// entry of a sender that finished and left.
    ///
    /// The removal is asked for right after the unsubscription, and without waiting for the reply (`requestRemoval`):
    /// `RemoveDevice` on a connected, unpaired device makes bluetoothd disconnect it (after its 2 s disconnect timer)
    /// and remove it as the link drops, whether or not anyone waits (adapter-api.txt; BlueZ's adapter.c). So a run
    /// that ends meanwhile (its deadline, SIGTERM) still leaves no cached entry behind. That entry would hide the
    /// sender from later scans: once BlueZ has resolved a device's services it ignores the UUIDs in its
    /// advertisements (device.c `device_add_eir_uuids`), and a sender that stopped while we were connected has
    /// removed its service from that resolved list.
    ///
    /// `handingBack`: the run ends with this visit (the last wanted message is stored and acknowledged), so the user
    /// gets control back at once instead of after the disconnection (about 3 s): the request is on the bus within
    /// `handBackWait` and bluetoothd finishes the rest on its own. Otherwise the visit waits, bounded, until the link
    /// is down, so the next scan does not meet a sender still paused for this link.
    func cleanUp(channel: CharacteristicSubscription?, device: Device, adapter: Adapter,
                         peer: PeerDescription, handingBack: Bool = false) async {
        let wasConnected = device.properties?.connected ?? false
        let remove = !(device.properties?.paired ?? false)
        let returnAtOnce = handingBack && remove
        await boundedCleanup(limit: returnAtOnce ? configuration.handBackWait : .seconds(10)) {
            await channel?.close()
            if remove { try? await adapter.requestRemoval(of: device) }
            guard !returnAtOnce else { return }
            if !remove { try? await device.disconnect() }
            try? await device.waitUntilDisconnected()
        }
        if wasConnected || channel != nil { emit(.disconnected(peer)) }
    }

    /// The characteristic a visit transfers through and, when the sender has one, its L2CAP channel (which then
    /// carries the HELLO, the values and our writes).
    ///
    /// A sender whose channel opened on the last visit gets it again at once, on the PSM it published then, without
    /// waiting for BlueZ to discover the services: on a loaded host that takes a second or more after each
    /// connection, and the channel needs none of them (the handshake, not the service, tells who the sender is). Its
    /// characteristic is the one resolved then, carried but not used over a channel. A PSM that no longer answers
    /// (the sender restarted) is forgotten and the visit takes the usual path, as after any failed visit.
    func transferCharacteristicAndChannel(on device: Device, adapter: Adapter, peer: PeerDescription) async throws
        -> (RemoteGATTCharacteristic, CharacteristicSubscription?) {
        if configuration.requestFramed, let known = progressState.knownChannel(of: peer.address) {
            do {
                let socket = try await connectChannel(to: device, psm: known.psm, adapter: adapter)
                return (known.characteristic, .channel(socket, characteristic: known.characteristic))
            } catch {
                // Nothing to tell: the usual path follows, and says what it finds.
                progressState.forgetChannel(of: peer.address)
            }
        }
        let characteristic = try await resolveCharacteristic(on: device)
        guard let (socket, psm) = await openChannel(on: device, adapter: adapter, peer: peer) else { return (characteristic, nil) }
        progressState.rememberChannel(of: peer.address, KnownChannel(psm: psm, characteristic: characteristic))
        return (characteristic, .channel(socket, characteristic: characteristic))
    }

    /// The sender's L2CAP channel (framed version 2's `channel`) and its PSM, when its service
    /// publishes one and the channel opens within `channelConnectTimeout`; nil otherwise (no
    /// channel characteristic: Apple's sample, bless, an older bletransfer; `--no-l2cap`), and
    /// the visit goes on over GATT. A failure is one warning line; the PSM must be an LE dynamic
    /// one (0x0080–0x00FF), so a hostile sender cannot point us at a fixed channel such as EATT's.
    func openChannel(on device: Device, adapter: Adapter, peer: PeerDescription) async -> (NotificationSocket, UInt16)? {
        guard configuration.requestFramed, configuration.channelTransport != nil,
              let published = try? device.characteristic(service: configuration.serviceUUID.canonical,
                                                         characteristic: TransferUUIDs.channelPSMCharacteristic.canonical)
        else { return nil }
        let limit = configuration.channelConnectTimeout
        do {
            let value = try await withTimeLimit(limit, onTimeout: { L2CAPChannelError.timedOut }) {
                try await published.readValue()
            }
            guard value.count == 2 else {
                emit(.warning("\(EventText.describe(peer)) publishes an L2CAP channel as \(value.count) bytes, not a PSM; using GATT notifications"))
                return nil
            }
            let psm = UInt16(value[0]) | UInt16(value[1]) << 8
            guard (0x0080...0x00FF).contains(psm) else {
                emit(.warning("\(EventText.describe(peer)) publishes PSM \(psm), not an LE dynamic one; using GATT notifications"))
                return nil
            }
            return (try await connectChannel(to: device, psm: psm, adapter: adapter), psm)
        } catch let error as BluetoothError {
            if case .accessDenied = error { return nil }
            emit(.warning("could not read the L2CAP channel of \(EventText.describe(peer)) (\(error)); using GATT notifications"))
            return nil
        } catch {
            if Task.isCancelled { return nil }
            emit(.warning("could not open the L2CAP channel of \(EventText.describe(peer)) (\(error)); using GATT notifications"))
            return nil
        }
    }

    func connectChannel(to device: Device, psm: UInt16, adapter: Adapter) async throws -> NotificationSocket {
        guard let transport = configuration.channelTransport, let remote = device.properties else {
            throw L2CAPChannelError.closed
        }
        let local = adapter.properties
        return try await withTimeLimit(configuration.channelConnectTimeout, onTimeout: { L2CAPChannelError.timedOut }) {
            try await transport.connect(adapter: local?.address, addressType: LEAddressType(bluez: local?.addressType),
                                        to: remote.address, peerType: LEAddressType(bluez: remote.addressType),
                                        psm: psm, receiveMTU: SequencedStream.channelValueLengths.upperBound)
        }
    }
}
