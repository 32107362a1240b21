import ArgumentParser
import Daemon
import DaemonSupport
import BlueZ

struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show every Bluetooth adapter as BlueZ and the kernel report it.",
        discussion: HelpText.discussion("""
            Exits 0 when the adapter can be used, else 69 (77 when access is denied).

            EXAMPLES:
              bletransfer status
              bletransfer status --adapter hci1 --json
            """, manual: """
            For each adapter: bluetoothd's view (object path, address, name, power, power \
            state, discovery, LE roles, advertising instances) next to the kernel's view of the \
            same HCI controller (libbluetooth), then one line saying whether the selected \
            adapter (--adapter, or the default: the lowest hciN) can be used: 0 it is ready \
            (present, LE-capable, powered); 69 Bluetooth is unavailable (no system bus, \
            bluetoothd not running, no adapter, no LE support, powered off); 77 the D-Bus \
            policy denies access to org.bluez; 64 --adapter names an adapter that does not exist.
            """)
    )

    @Option(name: .long, help: ArgumentHelp("Adapter to judge: hciN or its address.", valueName: "hciN"))
    var adapter: String?

    @Flag(name: .long, help: "Print one JSON object (stable keys) instead of text.") var json = false

    func run() async throws {
        let report = await BluetoothStatusReport.gather(adapterName: adapter)
        let links = await StatusLinks.gather()
        if json {
            print(EventRenderer.jsonEscapingTerminalControls(try StatusOutput.json(report, links: links)))
        } else {
            // Aliases and names come from BlueZ, set by whoever may write them: escaped.
            print(SafeText.escape(StatusOutput.text(report, links: links), keepingLineBreaks: true), terminator: "")
        }
        let status = StatusOutput.exitStatus(for: report.verdict.status)
        if status != .success { throw status.exitCode }
    }
}
