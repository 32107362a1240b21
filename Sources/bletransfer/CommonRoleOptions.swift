import ArgumentParser
import Daemon
import Options
import Storage
import Transfer

// The option groups `send`, `receive` and `daemon` share. Each group holds options of one purpose, so a command lists
// them under one heading (`@OptionGroup(title:)`; groups of one title share a heading): input and output, peers and
// trust, Bluetooth, limits, advanced. A command lists only the groups that apply to it (`daemon` has no --timeout).

/// `--adapter`, `--service-uuid`, `--characteristic-uuid`: where the role runs.
struct BluetoothOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Adapter to use (default: the first BlueZ reports).", valueName: "hciN"))
    var adapter: String?

    @Option(name: .customLong("service-uuid"), help: ArgumentHelp(
        "Transfer service UUID (default: Apple's sample's).", valueName: "UUID"))
    var serviceUUIDText: String?

    @Option(name: .customLong("characteristic-uuid"), help: ArgumentHelp(
        "Transfer characteristic UUID (default: Apple's).", valueName: "UUID"))
    var characteristicUUIDText: String?

    @Flag(name: .customLong("no-tune"), help: ArgumentHelp("Leave the adapter's link as it is (see 'link tune')."))
    var noTune = false

    var serviceUUID: BluetoothUUID {
        get throws { try serviceUUIDText.map { try BluetoothUUID($0) } ?? TransferUUIDs.appleSampleService }
    }

    var characteristicUUID: BluetoothUUID {
        get throws { try characteristicUUIDText.map { try BluetoothUUID($0) } ?? TransferUUIDs.appleSampleCharacteristic }
    }

    mutating func validate() throws {
        for (option, text) in [("--service-uuid", serviceUUIDText), ("--characteristic-uuid", characteristicUUIDText)] {
            guard let text else { continue }
            do { _ = try BluetoothUUID(text) } catch { throw ValidationError("\(option): \(error)") }
        }
        if let adapter, !Self.isAdapterName(adapter) {
            throw ValidationError("--adapter: '\(adapter)' is not an adapter name such as hci0")
        }
    }

    static func isAdapterName(_ name: String) -> Bool {
        name.hasPrefix("hci") && name.count > 3 && name.dropFirst(3).allSatisfy(\.isNumber)
    }

    /// `options` aimed at the adapter and UUIDs these name, with `secureMode` and the transport `transport` allows.
    func targeting<Options: RoleOptions>(_ options: Options, secureMode: SecureModePolicy?,
                                         transport: TransportOptions) throws -> Options {
        var options = options
        options.adapterName = adapter
        options.serviceUUID = try serviceUUID
        options.characteristicUUID = try characteristicUUID
        options.secureMode = secureMode
        options.usesL2CAP = !transport.noL2CAP
        return options
    }
}

/// `--no-l2cap` (advanced).
struct TransportOptions: ParsableArguments {
    @Flag(name: .customLong("no-l2cap"), help: ArgumentHelp("Stay on GATT between bletransfer hosts (no L2CAP)."))
    var noL2CAP = false
}

/// `-q`, `-v`, `--json` of `send` and `receive`: how much the command says while it runs.
struct ReportingOptions: ParsableArguments {
    @Flag(name: .shortAndLong, help: "No progress, only errors.") var quiet = false

    @Flag(name: .shortAndLong, help: "Print every step on standard error.") var verbose = false

    @Flag(name: .long, help: "One JSON event per line on standard output.") var json = false

    var outputMode: EventOutputMode { quiet ? .quiet : .choose(json: json, verbose: verbose) }

    /// A warning before the role runs: a `warning` event with --json (standard error stays
    /// for the one error line), one line on standard error otherwise, nothing with --quiet.
    func warn(_ text: String) {
        if quiet { return }
        if json {
            EventRenderer.writeLine(JSONEvents.line("warning", WarningJSONEvent(text)), to: 1)
        } else { EventRenderer.writeLine("bletransfer: warning: \(text)", to: 2) }
    }

    mutating func validate() throws {
        if json && verbose { throw ValidationError("--json and --verbose cannot be combined") }
        if quiet && (json || verbose) {
            throw ValidationError("--quiet cannot be combined with \(json ? "--json" : "--verbose")")
        }
    }
}

/// `--timeout` of `send` and `receive` (a daemon runs until it is stopped).
struct TimeoutOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "Give up after this long (exit 75; default: never).", valueName: "TIME"), transform: seconds)
    var timeout: Double?

    /// `--timeout` as a duration (validated in `validate()`).
    var duration: Duration? { timeout.flatMap { try? OptionValidation.duration($0, option: "--timeout") } }

    mutating func validate() throws {
        if let timeout { try checkingOptions { _ = try OptionValidation.duration(timeout, option: "--timeout") } }
    }
}
