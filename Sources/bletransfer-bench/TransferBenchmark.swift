import ArgumentParser
// Placeholder until the transfer-core benchmark lands.
struct TransferBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "transfer")
}
