import BlueZ
import DaemonSupport
import Machines
import Transfer

/// Discovery: the scan that finds a sender worth a visit.
extension Central {
    enum ScanInput: Sendable {
        case sighting(DeviceSighting)
        case tick
        case ended
    }

    /// Scans until a peripheral offering the transfer service is worth a visit, then stops discovery (BlueZ connects
    /// unreliably while scanning) and returns it. Devices BlueZ already knows come first (they emit no
    /// InterfacesAdded); peers backing off are skipped until their pause ends.
    func discoverPeer(on adapter: Adapter) async throws -> (Device, PeerDescription) {
        let service = configuration.serviceUUID.canonical
        // Subscribe (and take the cache snapshot) before discovery starts, so nothing is missed.
        let sightings = adapter.sightings(serviceUUID: service)
        let forwardSightings = InputProducer<ScanInput> { input in
            for await sighting in sightings { input.yield(.sighting(sighting)) }
            // The sightings end with the adapter; a cancelled scan has nothing to report.
            if !Task.isCancelled { input.yield(.ended) }
        }
        // The ticks wake the scan when a peer's back-off ends, for peers BlueZ keeps in its
        // cache without reporting them again, and when a stop is asked for.
        return try await withMergedInputs(forwardSightings, .ticks(every: .seconds(1), .tick), .stopRequest(.tick)) { inputs in
            try await scan(adapter, for: service, inputs: inputs)
        }
    }

    /// The scan of `discoverPeer`, fed by `inputs`.
    func scan(_ adapter: Adapter, for service: String,
                      inputs: AsyncStream<ScanInput>) async throws -> (Device, PeerDescription) {
        do {
            try await adapter.setDiscoveryFilter(uuids: [service], transport: .le, duplicateData: true)
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            emit(.warning("SetDiscoveryFilter failed (\(error)); scanning without a filter"))
        }
        do {
            try await adapter.startDiscovery()
        } catch let error as BluetoothError {
            try Self.rethrowIfFatal(error)
            // InProgress: a discovery session of ours is already starting or running.
            guard case .bluez(.inProgress, _) = error else { throw error }
        }
        emit(.scanning(adapter: adapter.name))
        var scanStartedAt = ContinuousClock.now

        for await item in inputs {
            if GracefulStop.isRequested { throw StopRequested() }
            let candidates: [Device]
            switch item {
            case .sighting(let sighting): candidates = [sighting.device]
            case .tick:
                candidates = adapter.devices().filter { device in
                    device.properties.map { Self.offers(service, $0) } ?? false
                }
            case .ended: throw BluetoothError.objectGone("adapter \(adapter.name)")
            }
            let now = progressState.elapsed
            // Everything heard in this scan competes, not only the device just sighted: PeerBook.choose shares the
            // visits fairly between proven senders and new addresses. BlueZ reports an RSSI only for devices heard
            // during discovery, so cached entries of senders that left do not compete.
            var offered = candidates
            if case .sighting = item {
                offered += adapter.devices().filter { device in
                    guard device.reference != candidates.first?.reference, let properties = device.properties else { return false }
                    return properties.rssi != nil && Self.offers(service, properties)
                }
            }
            let withProperties = offered.compactMap { device in device.properties.map { (device, $0) } }
            let choices = withProperties.map { PeerBook.Candidate(address: $0.1.address.description, rssi: $0.1.rssi.map(Int.init)) }
            guard let index = progressState.withBook({ $0.choose(choices, at: now) }) else {
                if case .tick = item, ContinuousClock.now - scanStartedAt >= configuration.scanRestartInterval {
                    // Nothing worth a visit yet: a fresh scan resets the controller's duplicate
                    // filter and reports again a device whose first report was lost.
                    scanStartedAt = ContinuousClock.now
                    await restartDiscovery(adapter)
                }
                continue
            }
            let (device, properties) = withProperties[index]
            let peer = PeerDescription(address: properties.address.description, name: properties.alias ?? properties.name,
                                       rssi: properties.rssi.map(Int.init))
            emit(.peerFound(peer))
            await stopDiscovery(adapter)
            return (device, peer)
        }
        throw CancellationError()
    }

    static func offers(_ service: String, _ properties: DeviceProperties) -> Bool {
        properties.uuids.contains { BluetoothUUID.matches($0, service) }
    }

    func restartDiscovery(_ adapter: Adapter) async {
        await stopDiscovery(adapter)
        // InProgress or a transient refusal: the ticker tries again at the next interval; the
        // adapter going away reaches the state machine by its own path.
        try? await adapter.startDiscovery()
    }

    func stopDiscovery(_ adapter: Adapter) async {
        await boundedCleanup(limit: .seconds(5)) {
            try? await adapter.stopDiscovery()
        }
    }
}
