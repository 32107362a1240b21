import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Why a child process could not be started.
package struct SpawnError: Error, CustomStringConvertible {
    package let call: String
    package let errno: Int32
    package var description: String { "\(call): \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// A helper daemon of the tests (dbus-daemon, the BlueZoo mock) started with `posix_spawn` and
/// reaped with `waitpid`, nothing else: no run loop, no dispatch source, no SIGCHLD handler.
/// Foundation's `Process` on Linux waits by spinning a run loop and watches exits from a shared
/// monitor; torn down from a `deinit` on the cooperative pool of a loaded parallel test run, that
/// path crashed the test process. Here killing and reaping are two system calls.
package final class SpawnedProcess: Sendable {
    /// Where a child's standard output or error goes.
    package enum Output: Sendable {
        case null
        /// A descriptor the child gets a copy of (a pipe's write end, a log file); the caller
        /// keeps and closes its own.
        case descriptor(Int32)
    }

    package let pid: pid_t
    /// The wait status once reaped; guarded because `stop()` may run from any thread.
    private let reaped = Mutex<Int32?>(nil)

    /// Starts `executable` with `arguments` (argv[0] is the executable) and `environment` (this
    /// process's when nil). The child's signal mask is emptied and its dispositions reset: the
    /// test runner's threads block signals a daemon must see.
    package init(executable: String, arguments: [String], environment: [String: String]? = nil,
                standardOutput: Output = .null, standardError: Output = .null) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        for (target, output) in [(Int32(1), standardOutput), (Int32(2), standardError)] {
            switch output {
            case .null: posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
            case .descriptor(let fd): posix_spawn_file_actions_adddup2(&actions, fd, target)
            }
        }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let environmentLines = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var child: pid_t = 0
        let status = Self.withCStrings([executable] + arguments) { argv in
            Self.withCStrings(environmentLines) { envp in
                posix_spawn(&child, executable, &actions, &attributes, argv, envp)
            }
        }
        guard status == 0 else { throw SpawnError(call: "posix_spawn \(executable)", errno: status) }
        pid = child
    }

    deinit { stop() }

    /// Whether the child has not exited yet (reaps it if it has).
    package var isRunning: Bool { reap(blocking: false) == nil }

    /// SIGKILL, then waits for the exit: a daemon of the tests has nothing to save. Idempotent.
    package func stop() {
        guard reap(blocking: false) == nil else { return }
        _ = kill(pid, SIGKILL)
        _ = reap(blocking: true)
    }

    /// The wait status, reaping the child once; nil while it runs (non-blocking only).
    private func reap(blocking: Bool) -> Int32? {
        reaped.withLock { status in
            if let status { return status }
            var raw: Int32 = 0
            while true {
                let result = waitpid(pid, &raw, blocking ? 0 : WNOHANG)
                if result == pid { status = raw; return raw }
                if result == -1 && errno == EINTR { continue }
                // 0: still running. -1 ECHILD: not ours to reap any more; count it as gone.
                if result == -1 { status = -1; return -1 }
                return nil
            }
        }
    }

    private static func withCStrings<Result>(_ strings: [String], _ body: ([UnsafeMutablePointer<CChar>?]) -> Result) -> Result {
        var pointers = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return body(pointers)
    }
}
