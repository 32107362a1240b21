import ArgumentParser
import BlueZ
import Dispatch
import DaemonSupport
import Logging
import Machines
import Roles
import Transfer
import UnixSignals

#if canImport(Glibc)
import Glibc
#endif

/// Runs a role until it finishes, fails, its deadline passes, or SIGINT / SIGTERM arrives.
/// On a deadline or a signal the role's task is cancelled and awaited, so whatever it
/// registered with bluetoothd is unregistered before the command exits.
enum RoleRun {
    enum Outcome: Sendable {
        case finished
        case failed(any Error)
        /// The deadline (in seconds) passed.
        case timedOut(Double)
        /// This signal arrived (SIGINT or SIGTERM); exit with 128 + signal.
        case interrupted(Int32)
    }

    private enum Race: Sendable {
        case role(Outcome)
        case deadline(Double)
        case signal(Int32)
    }

    static func race(timeout: Duration?, _ role: @escaping @Sendable () async throws -> Void) async -> Outcome {
        // Trapped before the role starts, so an early Ctrl-C cannot end the process with our
        // GATT application and advertisement still registered.
        let signals = await UnixSignalsSequence(trapping: .sigint, .sigterm)
        return await withTaskGroup(of: Race?.self) { group in
            group.addTask {
                do {
                    try await role()
                    return .role(.finished)
                } catch {
                    return .role(.failed(error))
                }
            }
            group.addTask {
                for await signal in signals { return .signal(signal.rawValue) }
                return nil   // cancelled: the role ended first
            }
            if let timeout {
                group.addTask {
                    do {
                        try await Task.sleep(for: timeout)
                    } catch {
                        return nil
                    }
                    return .deadline(timeout.seconds)
                }
            }
            var first: Race?
            while first == nil, let next = await group.next() {
                first = next
            }
            group.cancelAll()
            // Let the role clean up; its own result after cancellation does not matter.
            while await group.next() != nil {}
            switch first {
            case .role(let outcome): return outcome
            case .deadline(let seconds): return .timedOut(seconds)
            case .signal(let signal): return .interrupted(signal)
            case nil: return .finished
            }
        }
    }

    /// The system-bus session a command's role runs on, and the logger it logs through
    /// (warnings, errors only with --quiet, debug with --verbose; DaemonLogHandler escapes what
    /// a peer may have put into a line). A bus that cannot be reached ends the command: one
    /// line, status 69.
    static func openSession(reporting: ReportingOptions) async throws -> (BluetoothSession, Logger) {
        var logger = Logger(label: "bletransfer") { DaemonLogHandler.standardError(label: $0) }
        logger.logLevel = reporting.verbose ? .debug : reporting.quiet ? .error : .warning
        do {
            return (try await BluetoothSession.open(logger: logger), logger)
        } catch {
            throw exit(reporting: RoleFailure(.unavailable, "\(error)"), json: reporting.json)
        }
    }

    /// Ends a command the way its role ended: returns when the role finished; otherwise throws
    /// the exit code, after one line for a failure or the deadline (`timedOut` words it),
    /// or 128 + the signal that stopped it.
    static func end(_ outcome: Outcome, json: Bool, timedOut: (Double) async -> String) async throws {
        switch outcome {
        case .finished:
            return
        case .failed(let error):
            let failure = (error as? any ClassifiedFailure) ?? RoleFailure(.software, "unexpected failure: \(error)")
            throw exit(reporting: failure, json: json)
        case .timedOut(let seconds):
            throw exit(reporting: RoleFailure(.timedOut, await timedOut(seconds)), json: json)
        case .interrupted(let signal):
            throw ExitCode(128 + signal)
        }
    }

    /// `exitCode(reporting:json:)` for use inside a command, where ParsableCommand's own static
    /// `exitCode(for:)` hides the free function.
    static func exit(reporting failure: any ClassifiedFailure, json: Bool) -> ExitCode {
        exitCode(reporting: failure, json: json)
    }

    static func format(_ seconds: Double) -> String {
        seconds == seconds.rounded() ? String(Int(seconds)) : String(seconds)
    }
}
