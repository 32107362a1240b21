import Foundation

/// The external programs bus tests need, found on PATH; tests that need them are enabled only
/// when they are there (CI installs them through scripts/setup.sh).
public enum TestTools {
    public static func find(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = "\(directory)/\(name)"
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }

    public static let dbusDaemon = find("dbus-daemon")
    public static let bluezoo = find("bluezoo")
    public static var haveBlueZoo: Bool { dbusDaemon != nil && bluezoo != nil }
    public static var haveDBusDaemon: Bool { dbusDaemon != nil }
}
