import Foundation
import PackagePlugin

/// Writes `BuildInfo.swift` (the commit the binary is built from) before every build of the
/// target it is applied to, so `bletransfer --version` names the source it came from whether it
/// was built by a plain `swift build` in a git checkout or by `scripts/package-deb.sh`.
///
/// A prebuild command, not a build command: the commit changes without any input file SwiftPM
/// could watch. The script rewrites the file only when its content changes, so an unchanged
/// commit recompiles nothing.
@main
struct BuildInfoPlugin: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        let outputDirectory = context.pluginWorkDirectoryURL.appending(path: "generated")
        let script = context.package.directoryURL.appending(path: "scripts/build-info.sh")
        return [
            .prebuildCommand(
                displayName: "Recording the commit \(target.name) is built from",
                executable: URL(fileURLWithPath: "/bin/sh"),
                arguments: [
                    script.path(percentEncoded: false),
                    context.package.directoryURL.path(percentEncoded: false),
                    outputDirectory.appending(path: "BuildInfo.swift").path(percentEncoded: false),
                ],
                outputFilesDirectory: outputDirectory
            )
        ]
    }
}
