// Where the harness finds the programs it starts: itself (for actors) and the relay.
// argv[0] is only a bare name when the harness is run from PATH, so both are found
// from the harness's own executable as the kernel knows it.

import CLISupport
import Foundation

/// The harness's own executable, as the kernel knows it.
let harnessExecutable = ownExecutable

/// `permission-relay`: `explicit` (`--relay`) when given, else the one beside the harness's
/// own executable, else the first on PATH; when there is none, a failure that says where it
/// looked and what to do.
func findRelay(explicit: String?, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> URL {
    let fm = FileManager.default
    if let explicit {
        guard fm.isExecutableFile(atPath: explicit), !isDirectory(explicit) else {
            throw CLIError.failure("--relay \(explicit): no executable permission-relay there")
        }
        return URL(fileURLWithPath: explicit)
    }
    let beside = harnessExecutable.deletingLastPathComponent().appendingPathComponent("permission-relay")
    if fm.isExecutableFile(atPath: beside.path), !isDirectory(beside.path) { return beside }
    for dir in (environment["PATH"] ?? "").split(separator: ":") where !dir.isEmpty {
        let candidate = URL(fileURLWithPath: String(dir)).appendingPathComponent("permission-relay")
        if fm.isExecutableFile(atPath: candidate.path), !isDirectory(candidate.path) { return candidate }
    }
    throw CLIError.failure(
        "cannot find permission-relay beside \(harnessExecutable.path) or on PATH; "
            + "build it with `swift build -c release`, or pass --relay PATH (or --socket PATH for a running relay)")
}

private func isDirectory(_ path: String) -> Bool {
    var isDirectory: ObjCBool = false
    return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
}
