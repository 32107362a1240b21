import BlueZ
@testable import Machines
@testable import Roles
@testable import Storage
import SystemPackage
import TestSupport
import Transfer

/// `send --file` → `receive --output-dir` on BlueZoo: the files of a `FileSetSource` sent from
/// hci0 to a receiver on hci1 that stores them under a directory and stops when the sender's
/// session ends.
struct FileSetExchange {
    /// What the receiver's run returned: the messages it stored.
    let received: Int
    /// What the sender's run returned within a minute of the receiver's end; nil when it did not.
    let sent: Int?
    let receiverEvents: [RoleEvent]

    static func run(_ files: FileSetSource, into inbox: String, timeout: Duration) async throws -> FileSetExchange {
        let bus = try await BlueZooBus.start()
        defer { bus.stop() }
        let (senderSession, _, sending) = try await SecureEndToEndBlueZooTests.startSender(
            on: bus, secureMode: nil, source: files)
        defer { senderSession.close() }
        var configuration = CentralTestData.configuration(count: nil, adapter: "hci1")
        configuration.endsWithSendersSession = true
        let (receiverSession, central, receiverLog) = try await SecureEndToEndBlueZooTests.receiver(on: bus, configuration)
        defer { receiverSession.close() }
        let received = try await central.run(sink: try OutputDirectorySink(path: FilePath(inbox)), timeout: timeout)
        return FileSetExchange(received: received, sent: await value(of: sending, within: .seconds(60)),
                               receiverEvents: await receiverLog.allWhenFinished())
    }
}
