// swift-tools-version: 6.1
import PackageDescription

// Layers, top to bottom (dependencies point down only):
//   bletransfer (CLI: parsing, and the checks that combine options)
//     → Daemon (the daemon's run, event rendering, exit statuses)
//     → Options (the role options, checked and mapped once onto the roles' configurations)
//     → Roles (the BlueZ shells: engines under one manager-state supervisor) → Storage (the files roles read and write: inputs, sinks,
//     output directory, receipt journal, resume spool) → Machines (the roles' pure decisions:
//     one protocol machine per side; events and failures) → Transfer and Trust (pure: wire formats; keys, Noise XX, records) and BlueZ
//     → DBus (driven on Reactor, the one epoll thread) → CDBus / CBlueZ / CReactor (C shims). Roles and above never import DBus: BlueZ's public API
//     speaks in BlueZ types (`DeviceReference`, `Adapter`, typed streams); its D-Bus-typed
//     members are `package`, for BlueZ's tests and the test support.
//   BluetoothModel (UUIDs, addresses, power states; pure) sits below both Transfer and BlueZ.
//   DaemonSupport (systemd, logging, signals, outbox) sits below Roles, Daemon and the CLI.
//   SystemCalls (the one EINTR/EAGAIN helper, and the threads blocking calls such as fsync run
//   on, off the cooperative pool) sits below everything that makes system calls.
//   Reactor (the process's one readiness loop) sits below DBus, BlueZ's sockets and DaemonSupport.
// Tests: one target per library, CLITests for the command line; TestSupport (under Tests/)
// holds what they share.

// The products of the package dependencies that targets use, each named once.
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let propertyBased: Target.Dependency = .product(name: "PropertyBased", package: "swift-property-based")
let serviceLifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let systemPackage: Target.Dependency = .product(name: "SystemPackage", package: "swift-system")
let unixSignals: Target.Dependency = .product(name: "UnixSignals", package: "swift-service-lifecycle")
let serviceLifecycleTestKit: Target.Dependency = .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle")

/// A test target that uses TestSupport, as all but DaemonSupportTests do.
func testTarget(_ name: String, _ dependencies: [Target.Dependency], exclude: [String] = []) -> Target {
    .testTarget(name: name, dependencies: dependencies + ["TestSupport"], exclude: exclude)
}

let package = Package(
    name: "bletransfer",
    // The tool, and the one library meant for reuse: the typed BlueZ client (its public API
    // speaks BluetoothModel's types and shows no D-Bus type). Every other target serves this
    // package only.
    products: [
        .executable(name: "bletransfer", targets: ["bletransfer"]),
        .library(name: "BlueZ", targets: ["BlueZ"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-system", from: "1.8.1"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // C libraries from apt, reached through thin shim modules.
        .systemLibrary(
            name: "CDBus",
            pkgConfig: "dbus-1",
            providers: [.apt(["libdbus-1-dev"])]
        ),
        .systemLibrary(
            name: "CBlueZ",
            pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]
        ),
        // Extended attributes from the C library (no package needed).
        .systemLibrary(name: "CFileAttributes"),
        // epoll and eventfd from the C library, for the reactor.
        .systemLibrary(name: "CReactor"),

        // The Bluetooth vocabulary both Transfer and BlueZ speak: UUIDs, adapter power states.
        // Pure Swift, no dependencies; Transfer re-exports it.
        .target(name: "BluetoothModel"),
        // The one place that retries a C call interrupted by a signal (EINTR) and reads its
        // errno, for the socket calls swift-system's FileDescriptor does not wrap; and
        // `BlockingCalls`, the threads where fsync and other blocking calls wait.
        .target(
            name: "SystemCalls",
            dependencies: [systemPackage]
        ),
        // The process's one readiness loop: a thread in epoll_wait over every descriptor the
        // process waits on (D-Bus sockets, notification sockets, inotify), timers and jobs.
        .target(
            name: "Reactor",
            dependencies: ["CReactor", "SystemCalls", systemPackage]
        ),
        // libdbus-1 wrapper: connections driven on the reactor, async calls, signals, exported objects.
        .target(
            name: "DBus",
            dependencies: ["CDBus", "Reactor", "SystemCalls", systemPackage, logging]
        ),
        // Typed org.bluez client: adapters, devices, remote and local GATT, advertising.
        // README.md says what the library product offers; Sources/bluez-scan is its example.
        .target(
            name: "BlueZ",
            dependencies: ["BluetoothModel", "DBus", "CBlueZ", "Reactor", "SystemCalls", systemPackage, logging],
            exclude: ["README.md"]
        ),
        // Pure Swift, no I/O: UUIDs, wire formats, chunking, reassembly, state machine.
        .target(
            name: "Transfer",
            dependencies: ["BluetoothModel", "SystemCalls", crypto]
        ),
        // Pure Swift, no I/O but key files: host identities, authorized peers, the Noise XX
        // handshake and the record cipher of framed version 2 (docs/wire-v2.md).
        .target(
            name: "Trust",
            dependencies: ["Transfer", crypto]
        ),
        // What unattended operation needs: systemd notify protocol, journald-friendly logging,
        // the sender's outbox.
        .target(
            name: "DaemonSupport",
            dependencies: ["Transfer", "Reactor", "SystemCalls", serviceLifecycle, systemPackage, logging]
        ),
        // The roles' pure decisions, no I/O and no clock: one machine per side (the sender's
        // `SenderConnection`, the receiver's `ReceiverVisit`), what each side keeps
        // between connections (HELLOs, the peer book, ACK bookkeeping), the addressing rule, and
        // the vocabulary both roles report in (events, failures).
        .target(
            name: "Machines",
            dependencies: ["Transfer", "Trust"]
        ),
        // The files the roles read and write, no Bluetooth: what a sender offers (files, trees,
        // standard input) and where a receiver stores (sinks, the output directory with its
        // names, partial files and the disk's reserve), the receipt journal (each message
        // stored once through a crash), the resume spool; and the keys the framed protocol
        // checks peers against (`SecureModePolicy`, the authorized-peers file as it changes).
        .target(
            name: "Storage",
            dependencies: ["Machines", "Transfer", "Trust", "DaemonSupport", "CFileAttributes", "SystemCalls", systemPackage, logging]
        ),
        // Peripheral (send) and Central (receive) engines over BlueZ.
        .target(
            name: "Roles",
            dependencies: [
                "Machines", "Transfer", "Trust", "Storage", "BlueZ", "DaemonSupport", "CFileAttributes", "SystemCalls",
                logging, serviceLifecycle, systemPackage,
            ]
        ),
        // What each role is told, as `send`/`receive` and `daemon` take it: the sender's and
        // receiver's options, checked once and mapped onto the roles' configurations.
        .target(
            name: "Options",
            dependencies: ["Roles", "Machines", "Storage", "Transfer"]
        ),
        // `bletransfer daemon` without its command line: supervisor, reporter, inbox and
        // outbox adapters; also the event rendering and exit statuses the CLI shares with it.
        .target(
            name: "Daemon",
            dependencies: [
                "Roles", "Options", "Machines", "Transfer", "Trust", "Storage", "BlueZ", "DaemonSupport", "SystemCalls",
                logging, serviceLifecycle, unixSignals, systemPackage,
            ]
        ),
        .executableTarget(
            name: "bletransfer",
            dependencies: [
                "Daemon", "Roles", "Options", "Machines", "Transfer", "BlueZ", "DaemonSupport", "Trust", "Storage",
                argumentParser, logging, serviceLifecycle, systemPackage, unixSignals,
            ],
            plugins: ["BuildInfoPlugin"]
        ),
        // Writes BuildInfo.swift (the commit `--version` names) before each build of the CLI.
        // Under Sources/ so that the repository keeps its top level.
        .plugin(
            name: "BuildInfoPlugin",
            capability: .buildTool(),
            path: "Sources/BuildInfoPlugin"
        ),
        // Benchmarks print figures and ratios against a baseline run in the same invocation.
        .executableTarget(
            name: "bletransfer-bench",
            dependencies: [
                "Transfer", "Trust", "Roles", "Machines", "Storage", "DBus", "Daemon", "TestSupport",
                crypto, argumentParser, systemPackage,
            ]
        ),

        // The BlueZ library's runnable example, on its public API only: adapters, then discovery.
        .executableTarget(
            name: "bluez-scan",
            dependencies: ["BlueZ"]
        ),

        // What several test targets and the benchmarks share: a private dbus-daemon, BlueZoo on it, the
        // executables tests look for, a seeded random generator, authorized-peers files.
        .target(
            name: "TestSupport",
            dependencies: ["BlueZ", "DBus", "Trust"],
            path: "Tests/TestSupport"
        ),
        testTarget("TransferTests", ["Transfer", propertyBased]),
        // Prints the Noise known answers NoiseXXTests holds, from an independent implementation.
        testTarget("TrustTests", ["Trust", "Transfer", propertyBased], exclude: ["noise-vectors.py"]),
        // keygen and id, run as the built executable.
        testTarget("TrustCLITests", ["bletransfer", "Daemon", "Trust"]),
        .testTarget(name: "ReactorTests", dependencies: ["Reactor", "SystemCalls"]),
        testTarget("DBusTests", ["DBus", propertyBased]),
        testTarget("BlueZTests", ["BluetoothModel", "BlueZ", "DBus", "Reactor"]),
        .testTarget(name: "DaemonSupportTests", dependencies: ["DaemonSupport", "SystemCalls", systemPackage]),
        // The roles' pure machines on their own: no bus, no BlueZ.
        testTarget("MachinesTests", ["Machines", "Transfer", "Trust", propertyBased]),
        testTarget("RolesTests", ["Roles", "Options", "Machines", "Storage", "Transfer", "Trust", "BlueZ", "DBus", "DaemonSupport", propertyBased, serviceLifecycleTestKit]),
        // DaemonBlueZooTests also run the `bletransfer` executable that `swift test` builds.
        testTarget("DaemonTests", ["Daemon", "Roles", "Machines", "Storage", "Transfer", "BlueZ", "DBus", "DaemonSupport"]),
        // The command line's own checks (option validation, usage errors).
        testTarget("CLITests", ["bletransfer", "Roles", "Options", "Machines", "Storage", argumentParser, serviceLifecycle]),
    ],
    swiftLanguageModes: [.v6]
)
