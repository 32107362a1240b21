/// bluetoothd's `main.conf`, read as bluetoothd reads it (GKeyFile: `[Group]` headers, `Key = value`, `#` comments;
/// the last value of a key wins).
public enum BluetoothdMainConf {
    public static func value(of key: String, in group: String, text: String) -> String? {
        var current = ""
        var found: String?
        for rawLine in text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline) {
            let line = rawLine.trimmingWhitespace()
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") && line.hasSuffix("]") {
                current = String(line.dropFirst().dropLast())
                continue
            }
            guard current == group, let equals = line.firstIndex(of: "=") else { continue }
            guard line[..<equals].trimmingWhitespace() == key else { continue }
            found = line[line.index(after: equals)...].trimmingWhitespace()
        }
        return found
    }

    /// The running bluetoothd's file (its `-f`/`--configfile` when readable, else `/etc/bluetooth/main.conf`) and its
    /// text; nil when it cannot be read.
    public static func read() -> (text: String, path: String)? {
        let path = GATTBearers.bluetoothdConfigFile() ?? "/etc/bluetooth/main.conf"
        return GATTBearers.readSmallFile(path).map { ($0, path) }
    }
}

/// The bluetoothd settings that bound how fast an LE link moves data (docs/throughput.md): the connection interval it
/// asks for as a central and the ATT MTU it offers.
public struct LinkSpeedSetting: Sendable, Equatable, Codable {
    /// `[LE] MinConnectionInterval` / `MaxConnectionInterval`, in 1.25 ms units; nil when not set (the kernel's
    /// defaults apply: 24 and 40, 30–50 ms).
    public var minimumConnectionInterval: Int?
    public var maximumConnectionInterval: Int?
    /// `[GATT] ExchangeMTU`: the ATT MTU bluetoothd offers (23…517, default 517).
    public var exchangeMTU: Int
    public var file: String?

    public static let kernelDefaultMinimumInterval = 24
    public static let kernelDefaultMaximumInterval = 40
    public static let defaultExchangeMTU = 517

    public init(minimumConnectionInterval: Int?, maximumConnectionInterval: Int?, exchangeMTU: Int, file: String?) {
        self.minimumConnectionInterval = minimumConnectionInterval
        self.maximumConnectionInterval = maximumConnectionInterval
        self.exchangeMTU = exchangeMTU
        self.file = file
    }

    public static func parse(mainConf text: String, file: String?) -> LinkSpeedSetting {
        func interval(_ key: String) -> Int? {
            // 0x0006…0x0C80 (7.5 ms…4 s) is the range the Core specification allows.
            BluetoothdMainConf.value(of: key, in: "LE", text: text).flatMap { Int($0) }.flatMap { (6...3200).contains($0) ? $0 : nil }
        }
        let mtu = BluetoothdMainConf.value(of: "ExchangeMTU", in: "GATT", text: text).flatMap { Int($0) }
        return LinkSpeedSetting(minimumConnectionInterval: interval("MinConnectionInterval"),
                                maximumConnectionInterval: interval("MaxConnectionInterval"),
                                exchangeMTU: mtu.map { min(max($0, 23), 517) } ?? defaultExchangeMTU, file: file)
    }

    public static func current() -> LinkSpeedSetting {
        guard let (text, path) = BluetoothdMainConf.read() else {
            return LinkSpeedSetting(minimumConnectionInterval: nil, maximumConnectionInterval: nil,
                                    exchangeMTU: defaultExchangeMTU, file: nil)
        }
        return parse(mainConf: text, file: path)
    }

    /// An interval in 1.25 ms units as milliseconds ("7.5", "30").
    static func milliseconds(_ units: Int) -> String {
        let tenths = units * 125 / 10
        return tenths % 10 == 0 ? "\(tenths / 10)" : "\(tenths / 10).\(tenths % 10)"
    }

    public var summary: String {
        let low = minimumConnectionInterval ?? Self.kernelDefaultMinimumInterval
        let high = maximumConnectionInterval ?? Self.kernelDefaultMaximumInterval
        let origin = minimumConnectionInterval == nil && maximumConnectionInterval == nil
            ? "kernel default" : "[LE] in \(file ?? "main.conf")"
        return "connection interval asked for \(Self.milliseconds(low))–\(Self.milliseconds(high)) ms (\(origin)), "
            + "ATT MTU offered \(exchangeMTU) (values up to \(min(exchangeMTU - 3, 512)) bytes); see docs/throughput.md"
    }
}
