import ArgumentParser
import Foundation

@main
struct BLETransferCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bletransfer",
        abstract: "Move text and files between two Linux hosts over Bluetooth Low Energy.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              bletransfer receive                   on host B: wait for one message
              bletransfer send "hello"              on host A: send it
              bletransfer send -f photo.jpg         a file, with its name
              bletransfer pair                      on both hosts: trust each other (type the other's code)

            EXIT STATUS (sysexits(3)):
              0    success
              64   usage: an unknown option or a value no run can take
              65   data: a message failed verification, is empty or too large
              66   no input: a file to send or an identity is missing
              69   unavailable: no bluetoothd, no adapter, no LE support
              70   internal error
              73   cannot create: the output directory, a key that exists
              74   I/O error: reading or writing a local file
              75   timed out (--timeout)
              77   permission denied: D-Bus policy or file permissions; pairing declined
              78   configuration: identity or authorized peers missing or malformed
              130  interrupted (SIGINT); 143: terminated (SIGTERM); daemon: 0
            """, manual: """
            One host runs `bletransfer send` (a GATT peripheral that advertises the transfer \
            service and notifies the message), the other runs `bletransfer receive` (a central \
            that scans, connects, subscribes and reassembles). Both talk to bluetoothd over \
            D-Bus; no root is needed where the D-Bus policy lets the user reach org.bluez.

            The flow and the default UUIDs are those of Apple's CoreBluetooth "BTLE Transfer" \
            sample, so either side also works with an iPhone or Mac running that sample. \
            Between two bletransfer hosts messages are framed and encrypted; with \
            authorized peers ('bletransfer pair', or 'bletransfer id' and 'peers add') also \
            authenticated.

            Sizes take binary multiples, whole or not: 1048576, 64K or 64KiB, 1.5M, 64M or \
            64MiB, 1G or 1GiB (1K = 1024 bytes). Durations take units, several in a row: 250ms, \
            30s, 5m, 1m30s, 1h; a plain number is seconds. Errors are one line, "bletransfer: error: ...", sometimes followed by a \
            "hint: ..." line, on standard error.
            """),
        version: BLETransferVersion.current,
        subcommands: [
            SendCommand.self, ReceiveCommand.self, StatusCommand.self, DaemonCommand.self,
            PairCommand.self, KeygenCommand.self,
            IdCommand.self, PeersCommand.self, LinkCommand.self,
        ]
    )

    /// Parses and runs the command line in `CommandLineFront`'s voice.
    static func main() async {
        let arguments = Array(CommandLine.arguments.dropFirst())
        let outcome: CommandLineFront.Outcome
        switch CommandLineFront.parse(arguments) {
        case .finished(let finished): outcome = finished
        case .run(var command):
            do {
                if var asynchronous = command as? any AsyncParsableCommand {
                    try await asynchronous.run()
                } else { try command.run() }
                return
            } catch { outcome = CommandLineFront.outcome(for: error, arguments: arguments) }
        }
        outcome.write()
        Foundation.exit(outcome.status)
    }
}
