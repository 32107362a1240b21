import ArgumentParser
// Placeholder until the D-Bus benchmark lands.
struct DBusBenchmark: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "dbus")
}
