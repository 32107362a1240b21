import ArgumentParser
import BlueZ
import Daemon
import Foundation

/// `bletransfer link`: the adapter's link defaults, set for speed or put back, and shown.
struct LinkCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "link",
        abstract: "Ask the adapter for the fastest LE link, or show what it asks for.",
        discussion: HelpText.discussion("""
            EXAMPLES:
              sudo bletransfer link tune     # until reboot
              bletransfer link show
              sudo bletransfer link relax
            """, manual: """
            BlueZ's D-Bus API has no way to ask for a PHY or a connection interval; the \
            kernel's management channel has, for root (CAP_NET_ADMIN). `tune` selects the 2M \
            PHY for new connections, asks for a 7.5-15 ms connection interval (the kernel's \
            default is 30-50 ms; a controller picks within the range) and advertises every \
            152.5-170 ms (the kernel's default: 1.28 s), so that a peer finds this host and \
            transfers several times faster. The settings last until the adapter is removed or \
            the machine restarts. The service runs it before the daemon starts (ExecStartPre=+). \
            `relax` puts the kernel's defaults back. `show` needs no privilege.
            """),
        subcommands: [LinkTuneCommand.self, LinkRelaxCommand.self, LinkShowCommand.self],
        defaultSubcommand: LinkShowCommand.self
    )
}

/// Where `link` acts: an adapter named hciN (or the lowest one present).
struct LinkAdapterOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("Adapter: hciN (default: the lowest present).", valueName: "hciN"))
    var adapter: String?

    /// The controller's kernel index, or a one-line reason (and exit status) why there is none.
    func controller() throws -> (index: UInt16, name: String) {
        switch KernelBluetooth.report() {
        case .noBluetoothInKernel:
            throw LinkCommandFailure(status: .unavailable,
                                     description: "this kernel has no Bluetooth support (a VM or container?)")
        case .unavailable(let call, let errno):
            throw LinkCommandFailure(status: .unavailable, description: "\(call) failed: \(errno)")
        case .controllers(let controllers):
            if let adapter {
                guard let found = controllers.first(where: { $0.name == adapter || $0.address == adapter.uppercased() }) else {
                    let known = controllers.map(\.name).joined(separator: ", ")
                    let message = "no adapter \(adapter) (present: \(known.isEmpty ? "none" : known))"
                    throw LinkCommandFailure(status: .usage, description: message)
                }
                return (UInt16(found.id), found.name)
            }
            guard let first = controllers.min(by: { $0.id < $1.id }) else {
                throw LinkCommandFailure(status: .unavailable,
                                         description: "no Bluetooth adapter (plug one in, or check `rfkill list`)")
            }
            return (UInt16(first.id), first.name)
        }
    }
}

/// A `link` subcommand's one-line failure and its exit status.
struct LinkCommandFailure: Error, CustomStringConvertible {
    var status: ExitStatus
    var description: String
}

/// Runs `body`, turning a `LinkCommandFailure` into its line on standard error and its status.
func runLinkCommand(_ body: () async throws -> Void) async throws {
    do {
        try await body()
    } catch let failure as LinkCommandFailure {
        FileHandle.standardError.write(Data("bletransfer link: \(failure.description)\n".utf8))
        throw failure.status.exitCode
    }
}

struct LinkTuneCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tune",
        abstract: "Select 2M, a 7.5-15 ms interval and fast advertising (root).",
        discussion: """
            EXAMPLES:
              sudo bletransfer link tune
              sudo bletransfer link tune --adapter hci1
            """)

    @OptionGroup var target: LinkAdapterOption
    @Flag(name: .shortAndLong, help: "Print nothing when all went well.") var quiet = false

    func run() async throws { try await apply(.tuned, on: target, quiet: quiet) }
}

struct LinkRelaxCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "relax",
        abstract: "Put back the kernel's link defaults (root).",
        discussion: """
            EXAMPLES:
              sudo bletransfer link relax
            """)

    @OptionGroup var target: LinkAdapterOption
    @Flag(name: .shortAndLong, help: "Print nothing when all went well.") var quiet = false

    func run() async throws { try await apply(.kernel, on: target, quiet: quiet) }
}

/// Asks the adapter `option` names for `target` and prints what that did, or fails with the line that says what it
/// could not do.
private func apply(_ target: AdapterLinkTarget, on option: LinkAdapterOption, quiet: Bool) async throws {
    try await runLinkCommand {
        let controller = try option.controller()
        let outcome = await AdapterTuning.apply(target, controller: controller.index)
        let adapter = controller.name
        if outcome.refusals.contains(where: { $0.limit == .privilege }) {
            throw LinkCommandFailure(status: .permissionDenied, description: "\(adapter): \(outcome.summary)")
        }
        if !outcome.refusals.isEmpty {
            FileHandle.standardError.write(Data("bletransfer link: \(adapter): \(outcome.summary)\n".utf8))
        }
        if !quiet && !outcome.applied.isEmpty { print("\(adapter): " + outcome.applied.joined(separator: ", ")) }
    }
}

struct LinkShowCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Show what the adapter asks for and its live LE connections.",
        discussion: """
            EXAMPLES:
              bletransfer link show
              bletransfer link show --adapter hci1 --json
            """)

    @OptionGroup var target: LinkAdapterOption
    @Flag(name: .long, help: "Print one JSON object instead of text.") var json = false

    func run() async throws {
        try await runLinkCommand {
            let controller = try target.controller()
            let view = await AdapterLinkView.gather(controller: controller.index, name: controller.name)
            if json {
                let data = try JSONEncoder.sortedKeys.encode(view)
                print(String(decoding: data, as: UTF8.self))
            } else { print(view.text, terminator: "") }
        }
    }
}
