import Roles
import Testing
import Transfer

/// The one check and mapping of the options `send`/`receive` share with `daemon`.
@Suite struct RoleOptionsTests {
    @Test func senderOptionsMapOntoTheConfiguration() throws {
        let defaults = SenderOptions().configuration
        #expect(defaults.acknowledgementTimeout == PeripheralConfiguration().acknowledgementTimeout)
        #expect(defaults.minimumTransferRate == PeripheralConfiguration.defaultMinimumTransferRate)
        #expect(defaults.compatDelivery == .automatic)
        #expect(defaults.offersAcquireNotify)

        let options = SenderOptions(adapterName: "hci1", localName: "box", offersAcquireNotify: false,
                                    acknowledgementTimeout: 2.5, unsubscribeTimeout: 7, minimumRate: 0,
                                    compatDelivery: .indications, valueSize: 20)
        try options.validate()
        let configuration = options.configuration
        #expect(configuration.adapterName == "hci1")
        #expect(configuration.localName == "box")
        #expect(!configuration.offersAcquireNotify)
        #expect(configuration.acknowledgementTimeout == .milliseconds(2500))
        #expect(configuration.unsubscribeTimeout == .seconds(7))
        #expect(configuration.minimumTransferRate == 0)
        #expect(configuration.compatDelivery == .indications)
        #expect(configuration.valueSizeLimit == 20)
    }

    @Test func senderOptionsRefuseWhatNoSenderTakes() {
        let bad: [(SenderOptions, String)] = [
            (SenderOptions(localName: ""), "--name"),
            (SenderOptions(acknowledgementTimeout: .nan), "--ack-timeout"),
            (SenderOptions(unsubscribeTimeout: 1e300), "--unsubscribe-timeout"),
            (SenderOptions(minimumRate: -1), "--min-rate"),
            (SenderOptions(valueSize: 19), "--value-size"),
            (SenderOptions(valueSize: 513), "--value-size"),
        ]
        for (options, option) in bad { expectRefusal(of: option) { () throws(InvalidOption) in try options.validate() } }
    }

    @Test func receiverOptionsMapOntoTheConfiguration() throws {
        let defaults = ReceiverOptions().configuration(messageCount: 1, stopOnCorruptMessage: true)
        #expect(defaults.idleTimeout == ReceiverOptions.defaultIdleTimeout)
        #expect(defaults.minimumRate == CentralConfiguration.defaultMinimumRate)
        #expect(defaults.limits == .default)
        #expect(defaults.requestFramed)

        let options = ReceiverOptions(adapterName: "hci2", minimumRSSI: -70, maximumSize: 1000, idleTimeout: 1.5,
                                      requestFramed: false, minimumRate: 0, reserve: 0, quotaBytes: 5000, quotaFiles: 3)
        try options.validate()
        let configuration = options.configuration(messageCount: nil, stopOnCorruptMessage: false)
        #expect(configuration.adapterName == "hci2")
        #expect(configuration.messageCount == nil)
        #expect(!configuration.stopOnCorruptMessage)
        #expect(configuration.minimumRSSI == -70)
        #expect(configuration.limits.maximumMessageSize == 1000)
        #expect(configuration.idleTimeout == .milliseconds(1500))
        #expect(!configuration.requestFramed)
        #expect(configuration.minimumRate == 0)
        #expect(options.storageLimits == StorageLimits(reserveBytes: 0, quotaBytes: 5000, quotaFiles: 3))
    }

    @Test func receiverOptionsRefuseWhatNoReceiverTakes() {
        let bad: [(ReceiverOptions, String)] = [
            (ReceiverOptions(minimumRSSI: -128), "--min-rssi"),
            (ReceiverOptions(minimumRSSI: 21), "--min-rssi"),
            (ReceiverOptions(maximumSize: 0), "--max-size"),
            (ReceiverOptions(idleTimeout: 0), "--idle-timeout"),
            (ReceiverOptions(minimumRate: -5), "--min-rate"),
            (ReceiverOptions(reserve: -1), "--reserve"),
            (ReceiverOptions(quotaBytes: 0), "--quota-bytes"),
            (ReceiverOptions(quotaFiles: 0), "--quota-files"),
        ]
        for (options, option) in bad { expectRefusal(of: option) { () throws(InvalidOption) in try options.validate() } }
    }

    /// `validate` throws, naming `option`.
    private func expectRefusal(of option: String, _ validate: () throws(InvalidOption) -> Void) {
        do {
            try validate()
            Issue.record("\(option) should have been refused")
        } catch {
            #expect(error.option == option)
        }
    }
}
