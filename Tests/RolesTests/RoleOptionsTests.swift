@testable import Machines
@testable import Options
import Roles
@testable import Storage
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

        let options = changed(SenderOptions()) {
            $0.adapterName = "hci1"
            $0.localName = "box"
            $0.offersAcquireNotify = false
            $0.acknowledgementTimeout = 2.5
            $0.unsubscribeTimeout = 7
            $0.minimumRate = 0
            $0.compatDelivery = .indications
            $0.valueSize = 20
        }
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
            (changed(SenderOptions()) { $0.localName = "" }, "--name"),
            (changed(SenderOptions()) { $0.acknowledgementTimeout = .nan }, "--ack-timeout"),
            (changed(SenderOptions()) { $0.unsubscribeTimeout = 1e300 }, "--unsubscribe-timeout"),
            (changed(SenderOptions()) { $0.minimumRate = -1 }, "--min-rate"),
            (changed(SenderOptions()) { $0.valueSize = 19 }, "--value-size"),
            (changed(SenderOptions()) { $0.valueSize = 513 }, "--value-size"),
        ]
        for (options, option) in bad { expectRefusal(of: option) { () throws(InvalidOption) in try options.validate() } }
    }

    @Test func receiverOptionsMapOntoTheConfiguration() throws {
        let defaults = ReceiverOptions().configuration(messageCount: 1, stopOnCorruptMessage: true)
        #expect(defaults.idleTimeout == ReceiverOptions.defaultIdleTimeout)
        #expect(defaults.minimumRate == CentralConfiguration.defaultMinimumRate)
        #expect(defaults.limits == .default)
        #expect(defaults.requestFramed)

        let options = changed(ReceiverOptions()) {
            $0.adapterName = "hci2"
            $0.minimumRSSI = -70
            $0.maximumSize = 1000
            $0.idleTimeout = 1.5
            $0.requestFramed = false
            $0.minimumRate = 0
            $0.reserve = 0
            $0.quotaBytes = 5000
            $0.quotaFiles = 3
        }
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
            (changed(ReceiverOptions()) { $0.minimumRSSI = -128 }, "--min-rssi"),
            (changed(ReceiverOptions()) { $0.minimumRSSI = 21 }, "--min-rssi"),
            (changed(ReceiverOptions()) { $0.maximumSize = 0 }, "--max-size"),
            (changed(ReceiverOptions()) { $0.idleTimeout = 0 }, "--idle-timeout"),
            (changed(ReceiverOptions()) { $0.minimumRate = -5 }, "--min-rate"),
            (changed(ReceiverOptions()) { $0.reserve = -1 }, "--reserve"),
            (changed(ReceiverOptions()) { $0.quotaBytes = 0 }, "--quota-bytes"),
            (changed(ReceiverOptions()) { $0.quotaFiles = 0 }, "--quota-files"),
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

    /// `options` after `change`.
    private func changed<Options>(_ options: Options, _ change: (inout Options) -> Void) -> Options {
        var options = options
        change(&options)
        return options
    }
}
