import ArgumentParser

@main
struct BLETransferCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bletransfer",
        abstract: "Move text and files between two Linux hosts over Bluetooth Low Energy.",
        discussion: """
            One host runs `bletransfer send` (a GATT peripheral that advertises the transfer \
            service and notifies the message), the other runs `bletransfer receive` (a central \
            that scans, connects, subscribes and reassembles). Both talk to bluetoothd over \
            D-Bus; no root is needed where the D-Bus policy lets the user reach org.bluez.

            The flow and the default UUIDs are those of Apple's CoreBluetooth "BTLE Transfer" \
            sample, so either side also works with an iPhone or Mac running that sample.

            Exit statuses follow sysexits(3): 0 success, 64 usage, 65 data failed verification, \
            66 input missing, 69 Bluetooth unavailable, 70 internal error, 74 I/O error, \
            75 timed out, 77 permission denied.
            """,
        version: BLETransferVersion.current,
        subcommands: [
            SendCommand.self, ReceiveCommand.self, StatusCommand.self, DaemonCommand.self,
            KeygenCommand.self,
            IdCommand.self,
        ]
    )
}
