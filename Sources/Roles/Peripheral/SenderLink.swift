import BlueZ
import Machines

/// One subscriber's link as its connection uses it, both ways: where the values go (`channel`)
/// and what the central sends back on the same link (`read`), until it hangs up.
struct SenderLink: Sendable {
    enum Kind: Sendable {
        /// The socket BlueZ passed with `AcquireNotify`.
        case notificationSocket
        /// `PropertiesChanged(Value)` after `StartNotify`: BlueZ's calls report the hang-up.
        case propertiesChanged
        /// Our L2CAP channel: the values are its SDUs, and so are the central's writes.
        case l2capChannel
    }

    /// Reads the link's inbound side until the central hangs up, posting what it reads to the
    /// connection: indication confirmations (`indications`), the central's SDUs.
    typealias Reader = @Sendable (_ indications: Bool,
                                  _ post: AsyncStream<SenderConnection.Input>.Continuation) async -> Void

    let kind: Kind
    let channel: any NotificationChannel
    /// Nil: nothing to read (the hang-up comes as a BlueZ call).
    let read: Reader?
    let hangUpReason: String

    var overChannel: Bool { kind == .l2capChannel }

    static func notificationSocket(_ socket: NotificationSocket) -> SenderLink {
        SenderLink(kind: .notificationSocket, channel: SocketNotificationChannel(socket: socket),
                   read: { indications, post in
                       guard indications else { return await socket.waitForHangUp() }
                       // BlueZ 5.66 reports each confirmation with a Confirm call; later versions
                       // (and BlueZoo) write one byte 0x01 to this socket instead. Either counts.
                       while let packet = try? await socket.receive() {
                           for byte in packet where byte == 0x01 { post.yield(.confirmed) }
                       }
                   },
                   hangUpReason: "the central unsubscribed")
    }

    static func propertiesChanged(_ channel: PropertiesChangedNotificationChannel) -> SenderLink {
        SenderLink(kind: .propertiesChanged, channel: channel, read: nil, hangUpReason: "the central unsubscribed")
    }

    static func l2capChannel(_ socket: NotificationSocket) -> SenderLink {
        SenderLink(kind: .l2capChannel, channel: SocketNotificationChannel(socket: socket),
                   read: { _, post in
                       // The central's SDUs are its session's writes (its GATT writes are ignored).
                       while let value = try? await socket.receive() { post.yield(.written(value)) }
                   },
                   hangUpReason: "the central closed the L2CAP channel")
    }
}
