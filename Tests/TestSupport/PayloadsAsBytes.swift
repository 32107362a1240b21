import Transfer
import Trust

/// Tests give senders their payload as bytes in memory.
extension SecureSenderSession {
    package init(
        identity: HostIdentity, authorizedPeers: AuthorizedPeers, hello: HelloV2,
        payload: [UInt8], digest: [UInt8], metadata: FileMetadata?,
        maximumValueLength: Int, wantsMulti: Bool = false, acceptsResume: Bool = true, acceptsWindow: Bool = true,
        overChannel: Bool = false, firstMessageNumber: UInt32 = 0
    ) throws(SecureSessionError) {
        try self.init(identity: identity, authorizedPeers: authorizedPeers, hello: hello, payload: MessagePayload(payload),
                      digest: digest, metadata: metadata, maximumValueLength: maximumValueLength,
                      wantsMulti: wantsMulti, acceptsResume: acceptsResume, acceptsWindow: acceptsWindow,
                      overChannel: overChannel, firstMessageNumber: firstMessageNumber)
    }

    package mutating func sendNext(payload: [UInt8], digest: [UInt8], metadata: FileMetadata?) throws(SecureSessionError) {
        try sendNext(payload: MessagePayload(payload), digest: digest, metadata: metadata)
    }
}

extension MessageSender {
    package init(payload: [UInt8], maximumValueLength: Int) {
        self.init(message: OutgoingMessage(payload: payload), maximumValueLength: maximumValueLength)
    }
}

extension ReceivedMessage {
    package init(payload: [UInt8], format: TransferFormat, header: MessageHeader? = nil) {
        self.init(body: MessagePayload(payload), format: format, header: header)
    }
}
