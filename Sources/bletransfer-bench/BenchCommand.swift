import ArgumentParser

@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bletransfer-bench",
        abstract: "Benchmarks that print figures and ratios against a baseline run in the same invocation.",
        subcommands: [TransferBenchmark.self, SessionBenchmark.self, StreamBenchmark.self, DBusBenchmark.self, EventsBenchmark.self]
    )
}
