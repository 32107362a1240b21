import ArgumentParser
import Daemon
import Roles
import Transfer

/// Options shared by `send`, `receive` and `daemon`.
struct CommonRoleOptions: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp(
        "The adapter to use, e.g. hci1. Default: the first adapter BlueZ reports.", valueName: "hciN"))
    var adapter: String?

    @Option(name: .customLong("service-uuid"), help: ArgumentHelp(
        "The transfer service UUID (16-, 32- or 128-bit). Default: Apple's sample, E20A39F4-73F5-4BC4-A12F-17D1AD07A961.",
        valueName: "UUID"))
    var serviceUUIDText: String?

    @Option(name: .customLong("characteristic-uuid"), help: ArgumentHelp(
        "The transfer characteristic UUID. Default: Apple's sample, 08590F7E-DB05-467E-8757-72F6FAEB13D4.",
        valueName: "UUID"))
    var characteristicUUIDText: String?

    @Option(name: .long, help: ArgumentHelp(
        "Give up after this many seconds (exit status 75). Default: wait as long as it takes.",
        valueName: "SECONDS"))
    var timeout: Double?

    @Flag(name: .customLong("no-l2cap"), help: ArgumentHelp(
        "Between two bletransfer hosts, keep the transfer on GATT notifications and writes instead of "
        + "an L2CAP channel (framed version 2's `channel`: the sender publishes a PSM, the receiver "
        + "opens it; faster, and without bluetoothd in the data path)."))
    var noL2CAP = false

    @Flag(name: .long, help: "Print one JSON object per line on standard output, for scripts.")
    var json = false

    @Flag(name: .long, help: "Print every step on standard error.")
    var verbose = false

    var serviceUUID: BluetoothUUID {
        get throws { try serviceUUIDText.map { try BluetoothUUID($0) } ?? TransferUUIDs.appleSampleService }
    }

    var characteristicUUID: BluetoothUUID {
        get throws { try characteristicUUIDText.map { try BluetoothUUID($0) } ?? TransferUUIDs.appleSampleCharacteristic }
    }

    /// `--timeout` as a duration (validated in `validate()`).
    var timeoutDuration: Duration? {
        timeout.flatMap { try? OptionValidation.duration($0, option: "--timeout") }
    }

    var outputMode: EventOutputMode { .choose(json: json, verbose: verbose) }

    /// `options` aimed at the adapter and UUIDs these name, with the secure mode `secureMode`.
    func targeting<Options: RoleOptions>(_ options: Options, secureMode: SecureModePolicy?) throws -> Options {
        var options = options
        options.adapterName = adapter
        options.serviceUUID = try serviceUUID
        options.characteristicUUID = try characteristicUUID
        options.secureMode = secureMode
        options.usesL2CAP = !noL2CAP
        return options
    }

    mutating func validate() throws {
        if let text = serviceUUIDText {
            do { _ = try BluetoothUUID(text) } catch { throw ValidationError("--service-uuid: \(error)") }
        }
        if let text = characteristicUUIDText {
            do { _ = try BluetoothUUID(text) } catch { throw ValidationError("--characteristic-uuid: \(error)") }
        }
        if let adapter, !Self.isAdapterName(adapter) {
            throw ValidationError("--adapter: '\(adapter)' is not an adapter name such as hci0")
        }
        if let timeout { try checkingOptions { _ = try OptionValidation.duration(timeout, option: "--timeout") } }
        if json && verbose {
            throw ValidationError("--json and --verbose cannot be combined")
        }
    }

    static func isAdapterName(_ name: String) -> Bool {
        name.hasPrefix("hci") && name.count > 3 && name.dropFirst(3).allSatisfy(\.isNumber)
    }
}
