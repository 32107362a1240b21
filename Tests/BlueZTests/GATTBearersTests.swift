import BlueZ
import Testing

/// Reading bluetoothd's `[GATT] Channels` and the kernel's L2CAP table: the facts behind the
/// "Apple's format may be reordered" warnings and `status`.
@Suite struct GATTBearersTests {
    @Test func debiansMainConfWithEverythingCommentedOutMeansBlueZsDefaultOfThree() {
        let text = """
            [General]
            #Name = BlueZ
            [GATT]
            # Number of ATT channels
            # Possible values: 1-5 (1 disables EATT)
            # Default to 3
            #Channels = 3
            """
        let setting = GATTChannelSetting.parse(mainConf: text, file: "/etc/bluetooth/main.conf")
        #expect(setting.channels == 3 && !setting.isExplicit && setting.allowsEnhancedATT)
    }

    @Test(arguments: [("Channels = 1", 1), ("Channels=1", 1), ("  Channels =   2  ", 2), ("Channels = 9", 5),
                      ("Channels = 0", 1), ("Channels = many", 3)])
    func channelsIsReadAndClampedAsBluetoothdDoes(line: String, expected: Int) {
        let setting = GATTChannelSetting.parse(mainConf: "[GATT]\n\(line)\n", file: nil)
        #expect(setting.channels == expected)
    }

    @Test func channelsOutsideTheGATTGroupIsIgnored() {
        let setting = GATTChannelSetting.parse(mainConf: "[General]\nChannels = 1\n[GATT]\nKeySize = 16\n", file: nil)
        #expect(setting.channels == 3 && !setting.isExplicit)
        #expect(GATTChannelSetting.parse(mainConf: "[GATT]\n#Channels = 1\n", file: nil).channels == 3)
    }

    /// What `/sys/kernel/debug/bluetooth/l2cap` showed in the lab: listening sockets (state 4,
    /// peer 00:…) on PSM 39, and two connected EATT channels to the peer.
    static let table = """
        00:aa:01:00:00:42 (1) 00:00:00:00:00:00 (0) 4 39 0x0000 0x0000 517 0 1 128
        00:aa:01:00:00:42 (1) 00:00:00:00:00:00 (0) 4 0 0x0004 0x0000 672 672 1 0
        00:aa:01:00:00:42 (1) 00:aa:01:01:00:42 (1) 1 39 0x0040 0x0041 517 517 1 128
        00:aa:01:00:00:42 (1) 00:aa:01:01:00:42 (1) 1 39 0x0041 0x0040 517 517 1 128
        00:aa:01:00:00:42 (1) 00:aa:01:01:00:42 (1) 1 31 0x0042 0x0042 672 672 1 0
        """

    @Test func connectedEATTChannelsToOnePeerAreCounted() {
        #expect(GATTBearers.enhancedATTChannels(to: "00:AA:01:01:00:42", in: Self.table) == 2)
        #expect(GATTBearers.enhancedATTChannels(to: "00:AA:01:02:00:42", in: Self.table) == 0)
        #expect(GATTBearers.enhancedATTChannels(to: "00:AA:01:01:00:42", in: "") == 0)
        #expect(GATTBearers.enhancedATTChannels(to: "00:AA:01:01:00:42", in: "garbage\n1 2 3\n") == 0)
    }

    @Test func exposureFollowsTheSettingAndTheKernelTable() {
        let three = GATTChannelSetting(channels: 3, file: nil, isExplicit: false)
        let one = GATTChannelSetting(channels: 1, file: "/etc/bluetooth/main.conf", isExplicit: true)
        #expect(GATTBearers.exposure(to: "00:AA:01:01:00:42", setting: three, l2capTable: Self.table) == .present(count: 2))
        #expect(!GATTBearers.exposure(to: "00:AA:01:01:00:42", setting: one, l2capTable: Self.table).mayReorder)
        #expect(GATTBearers.exposure(to: "00:AA:01:09:00:42", setting: three, l2capTable: nil).mayReorder)
        // A readable table without channels to this peer: none yet (a central opens them late).
        #expect(!GATTBearers.exposure(to: "00:AA:01:09:00:42", setting: three, l2capTable: Self.table).mayReorder)
    }
}

@Suite struct LinkSpeedSettingTests {
    @Test func defaultsWhenNothingIsSet() {
        let setting = LinkSpeedSetting.parse(mainConf: "[LE]\n#MinConnectionInterval=6\n[GATT]\n#ExchangeMTU = 517\n", file: "/etc/bluetooth/main.conf")
        #expect(setting.minimumConnectionInterval == nil && setting.maximumConnectionInterval == nil)
        #expect(setting.exchangeMTU == 517)
        #expect(setting.summary.contains("30–50 ms (kernel default)"))
    }

    @Test func readsIntervalsAndMTUFromTheirGroupsOnly() {
        let text = """
        [General]
        MinConnectionInterval=99
        [LE]
        MinConnectionInterval = 6
        MaxConnectionInterval=12
        [GATT]
        ExchangeMTU = 247
        Channels = 1
        """
        let setting = LinkSpeedSetting.parse(mainConf: text, file: "m.conf")
        #expect(setting.minimumConnectionInterval == 6)
        #expect(setting.maximumConnectionInterval == 12)
        #expect(setting.exchangeMTU == 247)
        #expect(setting.summary.contains("7.5–15 ms ([LE] in m.conf)"))
        #expect(setting.summary.contains("values up to 244 bytes"))
        #expect(GATTChannelSetting.parse(mainConf: text, file: nil).channels == 1)
    }

    @Test func outOfRangeOrUnparsableValuesAreIgnoredOrClamped() {
        let text = "[LE]\nMinConnectionInterval=5\nMaxConnectionInterval=fast\n[GATT]\nExchangeMTU=9000\n"
        let setting = LinkSpeedSetting.parse(mainConf: text, file: nil)
        #expect(setting.minimumConnectionInterval == nil)
        #expect(setting.maximumConnectionInterval == nil)
        #expect(setting.exchangeMTU == 517)
    }
}

@Suite struct NotificationQueueLimitTests {
    @Test func belowSystemdsDefaultIsFlaggedWithTheFix() {
        let kernelDefault = NotificationQueueLimit(datagrams: 10)
        #expect(!kernelDefault.isSufficient)
        #expect(kernelDefault.summary.contains("net.unix.max_dgram_qlen = 512"))
        #expect(!kernelDefault.summary.contains("\n"))
        let systemd = NotificationQueueLimit(datagrams: 512)
        #expect(systemd.isSufficient && !systemd.summary.contains("set net.unix"))
        // Unreadable (another kernel, a sandbox): nothing to warn about, said as unknown.
        #expect(NotificationQueueLimit(datagrams: nil).isSufficient)
        #expect(NotificationQueueLimit(datagrams: nil).summary.hasPrefix("unknown"))
        #expect(NotificationQueueLimit.current().datagrams != nil)
    }
}
