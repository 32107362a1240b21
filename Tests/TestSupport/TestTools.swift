import Foundation

/// The external programs bus tests need, found on PATH; tests that need them are enabled only
/// when they are there (CI installs them through scripts/setup.sh).
package enum TestTools {
    package static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    package static let dbusDaemon = find("dbus-daemon")
    package static let bluezoo = find("bluezoo")
    package static var haveBlueZoo: Bool { dbusDaemon != nil && bluezoo != nil }
    package static var haveDBusDaemon: Bool { dbusDaemon != nil }
}
