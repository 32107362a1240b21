import SystemPackage
import SystemCalls

/// bluetoothd's `[GATT] Channels`: how many ATT bearers it opens or accepts per LE link. More than one means Enhanced
/// ATT (EATT): besides the fixed ATT channel, credit-based L2CAP channels on PSM 0x27, and BlueZ 5.66 hands each
/// notification to whichever bearer is free next, so notifications of one characteristic can overtake each other.
/// Apple's flow (compat) has no sequence numbers to repair that; the framed format has.
public struct GATTChannelSetting: Sendable, Equatable, Codable {
    public var channels: Int  // 1…5, as bluetoothd clamps it
    /// The configuration file it was read from; nil when none could be read.
    public var file: String?
    /// Whether the file sets `Channels` (false: BlueZ's built-in default applies).
    public var isExplicit: Bool

    /// BlueZ's built-in default since EATT support (5.56): 3 bearers.
    public static let builtInDefault = 3

    public var allowsEnhancedATT: Bool { channels > 1 }

    public init(channels: Int, file: String?, isExplicit: Bool) {
        self.channels = channels
        self.file = file
        self.isExplicit = isExplicit
    }

    /// Reads `[GATT] Channels` as bluetoothd does (GKeyFile; an unparsable value leaves the default; clamped to 1…5).
    public static func parse(mainConf text: String, file: String?) -> GATTChannelSetting {
        let value = BluetoothdMainConf.value(of: "Channels", in: "GATT", text: text)
        let channels = value.flatMap { Int($0) }.map { min(max($0, 1), 5) }
        return GATTChannelSetting(channels: channels ?? builtInDefault, file: file, isExplicit: channels != nil)
    }

    /// The running bluetoothd's setting: from its `-f`/`--configfile` file when readable, else
    /// `/etc/bluetooth/main.conf`.
    public static func current() -> GATTChannelSetting {
        guard let (text, path) = BluetoothdMainConf.read() else {
            return GATTChannelSetting(channels: builtInDefault, file: nil, isExplicit: false)
        }
        return parse(mainConf: text, file: path)
    }
}

/// Whether one LE link carries Enhanced ATT bearers, as far as this host can tell.
public enum EnhancedATTExposure: Sendable, Equatable {
    /// No EATT bearer to this peer: the kernel lists none, or bluetoothd allows one bearer.
    case none(because: String)
    /// The kernel lists `count` EATT channels (PSM 0x27) to this peer.
    case present(count: Int)
    /// bluetoothd allows several bearers and the kernel's table (debugfs, root only) is unreadable: the peer decides.
    case possible(because: String)

    public var mayReorder: Bool {
        if case .none = self { false } else { true }
    }

    /// One phrase for logs and `--json`.
    public var summary: String {
        switch self {
        case .none(let because): return "single ATT bearer (\(because))"
        case .present(let count): return "\(count) enhanced ATT bearer\(count == 1 ? "" : "s") besides the fixed one"
        case .possible(let because): return "enhanced ATT bearers possible (\(because))"
        }
    }
}

/// Facts about the ATT bearers of LE links, from bluetoothd's configuration and the kernel's L2CAP socket table.
public enum GATTBearers {
    public static let enhancedATTPSM = 0x27
    /// The kernel's table of L2CAP sockets (debugfs; readable by root).
    public static let kernelL2CAPTable = "/sys/kernel/debug/bluetooth/l2cap"

    /// How exposed the link to `address` ("AA:BB:CC:DD:EE:FF") is to EATT reordering.
    public static func exposure(to address: String,
                                setting: GATTChannelSetting = .current(),
                                l2capTable: String? = readSmallFile(kernelL2CAPTable)) -> EnhancedATTExposure {
        if !setting.allowsEnhancedATT {
            return .none(because: "bluetoothd uses one bearer ([GATT] Channels = 1\(setting.file.map { " in \($0)" } ?? ""))")
        }
        if let table = l2capTable {
            let count = enhancedATTChannels(to: address, in: table)
            if count > 0 { return .present(count: count) }
            // For now only: a central opens its EATT channels after service discovery, which may still be under
            // way. Callers probe again until the transfer is over (see `OrderPreservingNotificationChannel`).
            return .none(because: "the kernel lists no EATT channel to \(address) yet")
        }
        let origin = setting.isExplicit ? "[GATT] Channels = \(setting.channels)" : "BlueZ's default of \(setting.channels) GATT channels"
        return .possible(because: "\(origin); the kernel's L2CAP table is not readable")
    }

    /// Connected EATT channels to `address` in the kernel's L2CAP table, whose lines read
    /// `src (type) dst (type) state psm scid dcid imtu omtu sec_level mode` (PSM in decimal, state 1 = BT_CONNECTED).
    public static func enhancedATTChannels(to address: String, in table: String) -> Int {
        let wanted = address.lowercased()
        return table.split(whereSeparator: \.isNewline).filter { line in
            let fields = line.split(separator: " ")
            return fields.count >= 8 && fields[2].lowercased() == wanted && fields[4] == "1"
                && Int(fields[5]) == enhancedATTPSM
        }.count
    }

    /// The `-f`/`--configfile` argument of a running bluetoothd, when /proc shows one.
    static func bluetoothdConfigFile() -> String? {
        guard let entries = try? DirectoryEntry.list("/proc") else { return nil }
        for entry in entries {
            let name = entry.name
            guard !name.isEmpty, name.allSatisfy(\.isNumber),
                  readSmallFile("/proc/\(name)/comm")?.trimmingWhitespace() == "bluetoothd",
                  let commandLine = readSmallFile("/proc/\(name)/cmdline")
            else { continue }
            let arguments = commandLine.split(separator: "\0", omittingEmptySubsequences: false).map(String.init)
            for (index, argument) in arguments.enumerated() {
                if (argument == "-f" || argument == "--configfile"), index + 1 < arguments.count {
                    return arguments[index + 1]
                }
                if argument.hasPrefix("--configfile=") { return String(argument.dropFirst("--configfile=".count)) }
                if argument.hasPrefix("-f"), argument.count > 2 { return String(argument.dropFirst(2)) }
            }
            return nil
        }
        return nil
    }

    /// A text file of at most 1 MiB, or nil when it cannot be read.
    public static func readSmallFile(_ path: String) -> String? {
        guard let file = try? FileDescriptor.open(FilePath(path), .readOnly, options: .closeOnExec) else { return nil }
        defer { try? file.close() }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while bytes.count < 1 << 20 {
            guard let count = try? buffer.withUnsafeMutableBytes({ try file.read(into: $0) }) else { return nil }
            if count == 0 { break }
            bytes.append(contentsOf: buffer.prefix(count))
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension StringProtocol {
    func trimmingWhitespace() -> String {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" }
        guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
            return ""
        }
        return String(self[first...last])
    }
}
