import Daemon
import DaemonSupport
import Foundation
import Synchronization
import Trust

#if canImport(Glibc)
import Glibc
#endif

/// The question `bletransfer pair` asks once the codes are known (docs/pairing.md): this host shows its code, and its
/// person types the code the *other* host shows. Passkey entry's way of asking, over numeric comparison's codes: an
/// answer proves someone read the other screen, which a `y` piped in or typed ahead cannot.
///
/// The answer comes from a terminal only (`PairCommand` checks), and whatever was typed before the question appeared
/// is discarded (`tcflush`) before each prompt: a line typed ahead, or left in the terminal by a paste, is never
/// taken for the answer.
struct PairingQuestion {
    /// Where the answer is read: a terminal.
    let input: Int32
    let output: Int32
    /// How long the person has, for all tries together.
    let limit: Duration
    /// How many codes may be typed before the answer is no.
    static let tries = 3

    /// Shows the other host and this host's code, then reads what the person types: true only for the code the other
    /// host shows. Enter alone, `n`, the end of input, no answer within `limit` or `tries` wrong codes are no.
    func ask(about candidate: PairingExchange.Candidate) async -> Bool {
        let peer = SafeText.escape(candidate.name ?? "the other host")
        write("""

              other host:   \(peer)
              fingerprint:  \(candidate.key.fingerprint)
              this host's code: \(candidate.spacedShownCode)   (type it on \(peer))

            """)
        let deadline = ContinuousClock.now + limit
        for attempt in 1...Self.tries {
            // Anything typed before the person could read the question goes.
            _ = tcflush(input, TCIFLUSH)
            write("Type the code that \(peer) shows (Enter alone declines): ")
            guard let line = await TerminalLine.read(from: input, until: deadline) else {
                if !Task.isCancelled {
                    write("\nbletransfer: no answer within \(limit.components.seconds) s; declining\n")
                }
                return false
            }
            let answer = line.trimmingCharacters(in: .whitespaces).lowercased()
            if answer.isEmpty || answer == "n" || answer == "no" { return false }
            if candidate.isExpectedCode(answer) { return true }
            let left = Self.tries - attempt
            if left > 0 {
                write("bletransfer: that is not the code this host expects; read it off \(peer)'s screen "
                      + "(\(left) \(left == 1 ? "try" : "tries") left)\n")
            } else { write("bletransfer: the codes do not match: someone may be interfering; declining\n") }
        }
        return false
    }

    private func write(_ text: String) { EventRenderer.write(text, to: output) }
}

/// One line from a terminal, read on a thread of its own (a read blocks; the cooperative pool must not) polling in
/// short slices, so it ends at the deadline or when the asking task is cancelled (Ctrl-C) instead of blocking.
enum TerminalLine {
    /// The line without its line break; nil at the end of input, at `deadline`, or when the task is cancelled.
    static func read(from fd: Int32, until deadline: ContinuousClock.Instant) async -> String? {
        let reader = Reader()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                reader.install(continuation)
                Thread.detachNewThread { reader.finish(readLine(fd, until: deadline, stop: reader)) }
            }
        } onCancel: {
            reader.finish(nil)
        }
    }

    /// Longest line kept; the rest of a longer one is read and dropped.
    static let maximumLength = 1024

    private static func readLine(_ fd: Int32, until deadline: ContinuousClock.Instant, stop: Reader) -> String? {
        var line: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 256)
        while !stop.isFinished {
            let left = deadline - .now
            guard left > .zero else { return nil }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let slice = Int32(min(100, max(1, left.components.seconds * 1000 + left.components.attoseconds / 1_000_000_000_000_000)))
            let ready = poll(&descriptor, 1, slice)
            if ready < 0 && errno != EINTR { return nil }
            guard ready > 0 else { continue }
            let count = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR || errno == EAGAIN { continue }
                return nil
            }
            if count == 0 { return nil }
            for byte in buffer[0..<count] {
                if byte == UInt8(ascii: "\n") { return String(decoding: line, as: UTF8.self) }
                if line.count < maximumLength { line.append(byte) }
            }
        }
        return nil
    }

    /// Resumes the waiter once with the first of the thread's line and the cancellation's nil; stops the thread.
    private final class Reader: Sendable {
        private let state = Mutex<(continuation: CheckedContinuation<String?, Never>?, result: String??)>((nil, nil))

        var isFinished: Bool { state.withLock { $0.result != nil } }

        func install(_ continuation: CheckedContinuation<String?, Never>) {
            let early: String?? = state.withLock { state in
                if let result = state.result { return result }
                state.continuation = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }

        func finish(_ line: String?) {
            let waiting: CheckedContinuation<String?, Never>? = state.withLock { state in
                guard state.result == nil else { return nil }
                state.result = .some(line)
                defer { state.continuation = nil }
                return state.continuation
            }
            waiting?.resume(returning: line)
        }
    }
}
