// Per-user default locations, created with private permissions.

import CLISupport
import Foundation
import Glibc
import RelayProtocol

enum Paths {
    static var defaultSocket: String { RelayDefaults.socketPath() }
    /// Where the admin commands look: this user's relay, else the machine's.
    static var clientSocket: String { RelayDefaults.clientSocketPath() }

    /// `$XDG_STATE_HOME/permission-relay`, else `~/.local/state/permission-relay`.
    static var defaultData: String {
        let env = ProcessInfo.processInfo.environment
        if let s = env["XDG_STATE_HOME"], !s.isEmpty { return s + "/permission-relay" }
        let home = env["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return home + "/.local/state/permission-relay"
    }

    /// Creates `dir` and its parents (mode 0700 for what is created). An existing `dir` must
    /// be a directory of this user (root included) that no one else may write to: in one
    /// another user controls, they could put their own socket or a link in place of the
    /// relay's files.
    static func makePrivateDirectory(_ dir: String) throws {
        var st = stat()
        if lstat(dir, &st) == 0 {
            guard st.st_mode & S_IFMT == S_IFDIR else {
                throw CLIError.failure("\(dir) exists and is not a directory (a link is not followed); choose another location")
            }
            guard st.st_uid == geteuid() else {
                throw CLIError.failure(
                    "\(dir) belongs to uid \(st.st_uid), not to this user (uid \(geteuid())); choose another location,"
                        + " or give it to this user (chown)")
            }
            guard st.st_mode & 0o022 == 0 else {
                throw CLIError.failure(
                    "\(dir) may be written by others (mode \(String(st.st_mode & 0o7777, radix: 8))); make it private:"
                        + " chmod 700 \(dir)")
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

    /// Refuses anything but a regular file where the relay keeps its files in `dir`: a link
    /// there would have the relay write through it to whatever it points at.
    static func checkStoreFiles(in dir: String) throws {
        for name in ["relay.db", "relay.db-wal", "relay.db-shm", "relay.db-journal", "relay.lock"] {
            var st = stat()
            let path = dir + "/" + name
            guard lstat(path, &st) == 0 else { continue }
            guard st.st_mode & S_IFMT == S_IFREG else {
                throw CLIError.failure(
                    "\(path) is not a regular file (a link is never followed); remove it, or restore the store from a backup")
            }
        }
    }
}
