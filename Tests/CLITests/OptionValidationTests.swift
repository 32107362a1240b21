import ArgumentParser
@testable import bletransfer
@testable import Machines
@testable import Options
import Roles
@testable import Storage
import Testing

/// The option checks that keep a user's typo from trapping: every one a usage error (64).
@Suite struct OptionValidationTests {
    @Test func durationsAreBoundedInsteadOfTrapping() throws {
        #expect(try OptionValidation.duration(1.5, option: "--timeout") == .milliseconds(1500))
        #expect(try OptionValidation.duration(0, option: "--settle-time", allowZero: true) == .zero)
        for bad in [0, -1, 1e300, .infinity, .nan, 0.0001, OptionValidation.maximumSeconds + 1] {
            #expect(throws: InvalidOption.self) { try OptionValidation.duration(bad, option: "--timeout") }
        }
    }

    @Test func aSpoolInsideTheOutputDirectoryIsRecognized() {
        #expect(ReceiverBoundOptions.isWithin("/tmp/out/spool", "/tmp/out"))
        #expect(ReceiverBoundOptions.isWithin("/tmp/out", "/tmp/out/"))
        #expect(ReceiverBoundOptions.isWithin("/tmp/out/a/../spool", "/tmp/out"))
        #expect(!ReceiverBoundOptions.isWithin("/tmp/outside", "/tmp/out"))
        #expect(!ReceiverBoundOptions.isWithin("/tmp", "/tmp/out"))
    }

    @Test func maximumSizeIsBoundedByMemory() throws {
        #expect(OptionValidation.maximumMessageSize(physicalMemory: 24 << 30) == 4 << 30)
        #expect(OptionValidation.maximumMessageSize(physicalMemory: 512 << 20) == 128 << 20)
        #expect(try OptionValidation.maximumMessageSizeOption(64 << 20) == 64 << 20)
        // On disk a message may be far larger than memory; in memory the machine's bound holds.
        #expect(try OptionValidation.maximumMessageSizeOption(200 << 30) == 200 << 30)
        for bad in [0, -5, Int.max, (1 << 50) + 1] {
            #expect(throws: InvalidOption.self) { try OptionValidation.maximumMessageSizeOption(bad) }
        }
        var options = ReceiverOptions()
        options.maximumSize = 200 << 30
        #expect(options.limits.maximumStoredMessageSize == 200 << 30)
        #expect(options.limits.maximumMessageSize == OptionValidation.maximumMessageSize())
        options.maximumSize = nil
        #expect(options.limits.maximumStoredMessageSize == nil, "no bound on disk but the disk's")
        #expect(options.limits.maximumMessageSize == 64 << 20)
    }

    @Test func commandLinesWithHugeValuesAreUsageErrors() {
        let cases: [[String]] = [
            ["receive", "--max-size", "9223372036854775807"],
            ["receive", "--timeout", "1e300"],
            ["receive", "--idle-timeout", "1e17"],
            ["receive", "--min-rate", "-1"],
            ["receive", "--reserve", "10"],  // without --output-dir
            ["receive", "--output-dir", "/tmp/x", "--quota-files", "0"],
            ["receive", "--spool-dir", ""],
            ["daemon", "--role", "sender", "--outbox", "/tmp/x", "--spool-dir", "/tmp/spool"],
            ["send", "--timeout", "1e300", "hello"],
            ["daemon", "--role", "sender", "--outbox", "/tmp/x", "--settle-time", "1e300"],
            ["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "--max-size", "9223372036854775807"],
            ["daemon", "--role", "sender", "--outbox", "/tmp/x", "--reserve", "5"],
            ["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "--ack-timeout", "5"],
            ["send", "--ack-timeout", "1e300", "hello"],
            ["send", "--unsubscribe-timeout", "nan", "hello"],
            ["send", "--min-rate", "-1", "hello"],
            ["send", "--value-size", "19", "hello"],
            ["send", "--value-size", "513", "hello"],
            ["send", "--compat-delivery", "sometimes", "hello"],
            ["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "--value-size", "20"],
            ["daemon", "--role", "receiver", "--output-dir", "/tmp/x", "--compat-delivery", "notify"],
        ]
        for arguments in cases {
            #expect(throws: (any Error).self, "\(arguments)") { _ = try BLETransferCommand.parseAsRoot(arguments) }
            do {
                _ = try BLETransferCommand.parseAsRoot(arguments)
            } catch {
                #expect(BLETransferCommand.exitCode(for: error) == .validationFailure, "\(arguments)")
            }
        }
        #expect(throws: Never.self) {
            _ = try BLETransferCommand.parseAsRoot(["send", "--value-size", "20", "--compat-delivery", "indicate", "hello"])
            _ = try BLETransferCommand.parseAsRoot(["daemon", "--role", "sender", "--outbox", "/tmp/x",
                                                    "--value-size", "512", "--compat-delivery", "notify"])
        }
        #expect(throws: Never.self) {
            _ = try BLETransferCommand.parseAsRoot(["receive", "--output-dir", "/tmp/x", "--reserve", "0", "--quota-bytes", "1000",
                                             "--min-rate", "0", "--max-size", "1000000", "--timeout", "31536000"])
        }
    }
}
