import BlueZ
import DBus
import Foundation
import Transfer
import TestSupport
import Trust

/// A minimal GATT peripheral for central tests, built straight on the BlueZ layer (not on our
/// Peripheral engine, so the central is tested against an independent sender). It serves the
/// transfer characteristic on one adapter of a `BlueZooBus` and answers each subscription with
/// the next message of its script, the way Apple's sample peripheral does (values of a fixed
/// size, then `EOM`, no back-pressure), or with a scripted fault.
final class ScriptedPeripheral: Sendable {
    /// What one subscription gets.
    enum Delivery: Sendable {
        /// Apple's format: `chunk`-byte values then `EOM`, whatever the central wrote.
        case compat([UInt8], chunk: Int = 20)
        /// The retired framed version 1 when the central wrote a HELLO (compat otherwise): a
        /// sender of an old build.
        case retiredVersion1([UInt8])
        /// Compat values for the first `bytes` bytes, then the peripheral drops the
        /// subscription (closes its notification socket, as BlueZ does when the link is lost;
        /// no `EOM`). Needs the socket mechanism.
        case disconnectAfter([UInt8], bytes: Int)
        /// Compat values for the first `bytes` bytes, then silence (no `EOM`, link kept).
        case stallAfter([UInt8], bytes: Int)
    }

    /// How values reach BlueZ.
    enum Mechanism: Sendable {
        /// Offer AcquireNotify (BlueZ hands us a socket).
        case socket
        /// Only StartNotify: values go out as PropertiesChanged on Value.
        case propertiesChanged
    }

    let session: BluetoothSession
    let adapter: Adapter
    private let application: LocalGATTApplication
    private let advertisement: LEAdvertisement
    private let state: Recorder
    /// Serves the application's requests until `stop`.
    private let requests: Task<Void, Never>

    /// What the peripheral saw, for assertions.
    final class Recorder: @unchecked Sendable {
        // @unchecked Sendable: every field is only touched while holding `lock`.
        private let lock = NSLock()
        private var _hellos: [HelloV2] = []
        private var _otherWrites: [[UInt8]] = []
        private var _writes: [[UInt8]] = []
        private var _subscriptions = 0
        private var script: [Delivery]

        init(script: [Delivery]) { self.script = script }

        func withLock<T>(_ body: () -> T) -> T {
            lock.lock()
            defer { lock.unlock() }
            return body()
        }

        var hellos: [HelloV2] { withLock { _hellos } }
        /// What the central wrote besides its HELLOs (an ACK).
        var otherWrites: [[UInt8]] { withLock { _otherWrites } }
        var subscriptions: Int { withLock { _subscriptions } }

        func recordWrite(_ value: [UInt8]) {
            withLock {
                _writes.append(value)
                if let hello = HelloV2(parsing: value) { _hellos.append(hello) } else { _otherWrites.append(value) }
            }
        }

        /// The next delivery (the last one repeats) and the HELLO that preceded it, if any.
        func nextDelivery() -> (Delivery?, HelloV2?) {
            withLock {
                _subscriptions += 1
                let delivery = script.count > 1 ? script.removeFirst() : script.first
                return (delivery, _hellos.last)
            }
        }
    }

    var recorder: Recorder { state }

    /// Registers the application and advertisement on adapter `adapterIndex` of `bus`.
    static func start(on bus: BlueZooBus, adapterIndex: Int = 1, mechanism: Mechanism = .socket,
                      serviceUUID: BluetoothUUID = TransferUUIDs.appleSampleService,
                      characteristicUUID: BluetoothUUID = TransferUUIDs.appleSampleCharacteristic,
                      flags: [GATTCharacteristicFlag] = [.notify, .writeWithoutResponse],
                      script: [Delivery]) async throws -> ScriptedPeripheral {
        let session = try await bus.openSession()
        let adapter = try session.adapter(named: "hci\(adapterIndex)")
        let recorder = Recorder(script: script)

        @Sendable func values(for delivery: Delivery, hello: HelloV2?, valueLength: Int) -> (values: [[UInt8]], then: After) {
            func compat(_ payload: [UInt8], _ chunk: Int) -> [[UInt8]] {
                var sender = MessageSender(message: OutgoingMessage(payload: payload), maximumValueLength: chunk)
                var values: [[UInt8]] = []
                while let value = sender.nextValue() { values.append(value) }
                return values
            }
            switch delivery {
            case .compat(let payload, let chunk):
                return (compat(payload, chunk), .keep)
            case .retiredVersion1(let payload) where hello != nil:
                // Sequence number 0, the version-1 header's magic and version, a session; then
                // the payload behind sequence numbers.
                let first: [UInt8] = [0, 0, 0x89, 0x42, 0x4C, 0x54, 0x46, 0x0D, 0x0A, 0x1A, 1] + [UInt8](repeating: 0, count: 8)
                let pieces = stride(from: 0, to: payload.count, by: 16).enumerated().map { index, start in
                    [0, UInt8(index + 1)] + Array(payload[start..<min(start + 16, payload.count)])
                }
                return ([first] + pieces + [WireFormat.endOfMessage], .keep)
            case .retiredVersion1(let payload):
                return (compat(payload, 20), .keep)
            case .disconnectAfter(let payload, let bytes):
                return (compat(Array(payload.prefix(bytes)), 20).dropLast().map { $0 }, .disconnect)
            case .stallAfter(let payload, let bytes):
                return (compat(Array(payload.prefix(bytes)), 20).dropLast().map { $0 }, .silence)
            }
        }

        @Sendable func disconnectCentral() async {
            for device in adapter.devices() where device.properties?.connected == true {
                try? await device.disconnect()
            }
        }

        let application = LocalGATTApplication(session: session, service: LocalGATTService(
            uuid: serviceUUID.canonical,
            characteristics: [LocalGATTCharacteristic(
                uuid: characteristicUUID.canonical, flags: flags, offersAcquireNotify: mechanism == .socket)]))

        /// Sends the next delivery's values on an AcquireNotify socket, then holds it until BlueZ lets go.
        @Sendable func serve(_ subscription: NotifySubscription) async {
            let (delivery, hello) = recorder.nextDelivery()
            guard let delivery else { return }
            let plan = values(for: delivery, hello: hello, valueLength: subscription.socket.maximumValueLength)
            for value in plan.values {
                do { try await subscription.socket.send(value) } catch { return }
            }
            if plan.then == .disconnect {
                subscription.socket.close()
                return
            }
            await subscription.socket.waitForHangUp()
            subscription.socket.close()
        }

        // Unstructured: it serves the application's requests from `start` until `stop`.
        let requests = Task {
            await withDiscardingTaskGroup { group in
                for await event in application.events {
                    switch event {
                    case .write(_, let value, _, let reply):
                        recorder.recordWrite(value)
                        reply.succeed()
                    case .notifyStarted:
                        let (delivery, hello) = recorder.nextDelivery()
                        guard let delivery else { continue }
                        let plan = values(for: delivery, hello: hello, valueLength: 20)
                        group.addTask {
                            for value in plan.values {
                                try? application.notify(value)
                            }
                            if plan.then == .disconnect { await disconnectCentral() }
                        }
                    case .notifyAcquired(_, let subscription):
                        group.addTask { await serve(subscription) }
                    case .read, .notifyStopped, .notifyReleased, .confirmed:
                        break
                    }
                }
                group.cancelAll()
            }
        }

        trace("registering application")
        try await application.register(on: adapter)
        trace("registered application")
        let advertisement = LEAdvertisement(session: session, configuration: AdvertisementConfiguration(
            serviceUUIDs: [serviceUUID.canonical], localName: "scripted"))
        try await advertisement.register(on: adapter)
        trace("registered advertisement")
        return ScriptedPeripheral(session: session, adapter: adapter, application: application,
                                  advertisement: advertisement, state: recorder, requests: requests)
    }

    enum After: Sendable, Equatable { case keep, disconnect, silence }

    private init(session: BluetoothSession, adapter: Adapter, application: LocalGATTApplication,
                 advertisement: LEAdvertisement, state: Recorder, requests: Task<Void, Never>) {
        self.requests = requests
        self.session = session
        self.adapter = adapter
        self.application = application
        self.advertisement = advertisement
        self.state = state
    }

    func stop() async {
        await advertisement.unregister()
        await application.unregister()
        requests.cancel()
        session.close()
    }
}

func trace(_ text: String) {
    if EventRecorder.trace { FileHandle.standardError.write(Data("trace: \(text)\n".utf8)) }
}
