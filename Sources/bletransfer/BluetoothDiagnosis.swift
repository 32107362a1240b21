import BlueZ
import Daemon
import Machines

/// What `bletransfer status` says when Bluetooth cannot be used: its first line, first fix (a `hint:` line) and exit
/// status. send, receive and pair end with these words when Bluetooth is why: one way to name a problem.
struct BluetoothDiagnosis: Equatable {
    var message: String
    var hint: String?
    var status: ExitStatus

    /// Nil when the report's adapter is ready.
    init?(_ report: BluetoothStatusReport) {
        guard report.verdict.status != .ready else { return nil }
        message = report.verdict.message
        hint = report.fixes.first
        status = StatusOutput.exitStatus(for: report.verdict.status)
    }

    /// The system bus's view now (a new connection: the role's may be gone with bluetoothd).
    static func now(adapter: String?) async -> BluetoothDiagnosis? {
        BluetoothDiagnosis(await BluetoothStatusReport.gather(adapterName: adapter))
    }

    /// What ends a role before it starts, on its open `session`: no Bluetooth in the kernel, bluetoothd not running,
    /// access denied, `--adapter` naming no adapter, an adapter without LE. Nil when the role can start: ready, or a
    /// state the role waits out and reports itself (an adapter powered off, or not announced yet by a bluetoothd that
    /// just started). Checked before anything is made on disk (an output directory, an identity).
    static func atStart(of session: BluetoothSession, adapter: String?) -> BluetoothDiagnosis? {
        let report = BluetoothStatusReport.make(session: session, kernel: KernelBluetooth.report(), adapterName: adapter)
        guard let diagnosis = BluetoothDiagnosis(report) else { return nil }
        if report.hasNoBluetoothAtAll || report.bluetoothd != "running" || report.verdict.status != .unavailable {
            return diagnosis
        }
        guard let name = report.selectedAdapter, let selected = report.adapters.first(where: { $0.name == name }) else {
            return nil   // none announced yet: the role gives bluetoothd a moment
        }
        return selected.supportsLowEnergy ? nil : diagnosis
    }

    /// A failure in these words: the message status gives, with the failure's own kind.
    func failure(_ kind: FailureKind) -> CommandFailure { CommandFailure(kind, message, hint: hint) }
}
