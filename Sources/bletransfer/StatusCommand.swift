import ArgumentParser

// Placeholder until the BlueZ layer lands; replaced by the real status command.
struct StatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Show every Bluetooth adapter as BlueZ and the kernel report it."
    )
    func run() async throws {
        throw CleanExit.message("status: not available yet")
    }
}
