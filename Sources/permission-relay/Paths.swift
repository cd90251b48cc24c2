// Per-user default locations, created with private permissions.

import CLISupport
import Foundation
import Glibc
import RelayProtocol

enum Paths {
    static var defaultSocket: String { RelayDefaults.socketPath() }

    /// `$XDG_STATE_HOME/permission-relay`, else `~/.local/state/permission-relay`.
    static var defaultData: String {
        let env = ProcessInfo.processInfo.environment
        if let s = env["XDG_STATE_HOME"], !s.isEmpty { return s + "/permission-relay" }
        let home = env["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/permission-relay"
    }

    /// Creates `dir` and its parents (mode 0700 for what is created); refuses a directory of another user.
    static func makePrivateDirectory(_ dir: String) throws {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: dir, isDirectory: &isDir) {
            guard isDir.boolValue else { throw CLIError.failure("\(dir) exists and is not a directory") }
            var st = stat()
            if stat(dir, &st) == 0 && st.st_uid != getuid() && getuid() != 0 {
                throw CLIError.failure("\(dir) belongs to another user; choose another location")
            }
            return
        }
        do {
            try FileManager.default.createDirectory(
                atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CLIError.failure("cannot create \(dir): \(error.localizedDescription)")
        }
    }
}
