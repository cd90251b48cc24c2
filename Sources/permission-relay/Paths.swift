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
        RelayDefaults.baseDirectory("XDG_STATE_HOME", else: ".local/state") + "/permission-relay"
    }

    /// `path` from the working directory: as others (a client elsewhere, nats-server reading
    /// its configuration) must name it.
    static func absolute(_ path: String) -> String {
        path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
    }

    /// Creates `dir` and its parents (mode 0700 for what is created), and returns its
    /// canonical path: the checks, and SQLite (which refuses links anywhere in a path it
    /// opens), go by where it really is. A service manager may give the directory as a link
    /// (systemd's `DynamicUser=` does). It must be a directory of `owner` (this user, unless
    /// root works on a service's directory) that no one else may write to: where another
    /// user can write, they could put their own socket, or a link or a file of theirs, in
    /// place of the relay's files. A socket may also be in a sticky directory of root's
    /// (`forSocket`, such as /tmp), where no one else may remove or replace it.
    @discardableResult
    static func makePrivateDirectory(_ dir: String, owner: uid_t? = geteuid(), forSocket: Bool = false) throws -> String {
        var st = stat()
        if stat(dir, &st) != 0 {
            do {
                try FileManager.default.createDirectory(
                    atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw CLIError.failure(
                    "cannot create \(dir): \(error.localizedDescription) Create it, or choose another location (\(forSocket ? "--socket" : "--data"))."
                )
            }
        }
        guard let resolved = realpath(dir, nil) else {
            throw CLIError.failure("cannot resolve \(dir): \(String(cString: strerror(errno)))")
        }
        defer { free(resolved) }
        let path = String(cString: resolved)
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw CLIError.failure("\(dir) exists and is not a directory; choose another location")
        }
        let sharedSticky = forSocket && st.st_mode & S_ISVTX != 0 && st.st_uid == 0
        if let owner, st.st_uid != owner, !sharedSticky {
            throw CLIError.failure(
                "\(dir) belongs to uid \(st.st_uid), not to this user (uid \(owner)); choose another location,"
                    + " or give it to this user (chown)")
        }
        guard st.st_mode & 0o022 == 0 || sharedSticky else {
            throw CLIError.failure(
                "\(dir) may be written by others (mode \(String(st.st_mode & 0o7777, radix: 8))); make it private:"
                    + " chmod 700 \(dir)")
        }
        return path
    }

    /// Where `dir` really is (SQLite refuses links anywhere in a path it opens), or `dir` as
    /// it is when it cannot be resolved (the command then says it cannot open the store).
    static func canonical(_ dir: String) -> String {
        guard let resolved = realpath(dir, nil) else { return dir }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// The owner a store command requires of the data directory: this user's, but root may
    /// work on the directory of a relay that runs as a user of its own.
    static var storeCommandOwner: uid_t? { geteuid() == 0 ? nil : geteuid() }

    /// The files the relay keeps in its data directory.
    static let storeFiles = ["relay.db", "relay.db-wal", "relay.db-shm", "relay.db-journal", "relay.lock"]

    /// Refuses anything but a regular file where the relay keeps its files in `dir`: a link
    /// there would have the relay write through it to whatever it points at. Makes those
    /// files private to their owner: a store copied into place by hand may be readable by
    /// all, and SQLite gives its WAL the database's mode. Called before SQLite opens the
    /// store, as `giveStoreFiles` is after: closing any descriptor of `relay.db` drops the
    /// process's POSIX locks on it, SQLite's among them. A file of another user than `owner`
    /// is refused: that user could read the store, or change it under the relay.
    static func checkStoreFiles(in dir: String, owner: uid_t?) throws {
        for name in storeFiles {
            let path = dir + "/" + name
            // Changed through the file opened, never by its name again: a link put in its
            // place meanwhile (the directory may be another user's, when root restores) is
            // not followed.
            // The lock holds nothing: it goes. A file of the store may be the store's only copy.
            let advice = name == "relay.lock" ? "remove it" : "remove it, or restore the store from a backup"
            let notRegular = CLIError.failure("\(path) is not a regular file (a link is never followed); \(advice)")
            let fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                switch errno {
                case ENOENT: continue
                case EACCES: throw CLIError.failure("cannot read \(path): permission denied; \(ownershipAdvice(path))")
                default: throw notRegular  // a link (ELOOP), a socket (ENXIO), …
                }
            }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { throw notRegular }
            if let owner, st.st_uid != owner {
                throw CLIError.failure(
                    "\(path) belongs to uid \(st.st_uid), not to this user (uid \(owner)); if it is the store's, give it to this"
                        + " user (chown), else remove it")
            }
            if st.st_mode & 0o077 != 0 && fchmod(fd, (st.st_mode & 0o700) | 0o600) != 0 {
                throw CLIError.failure(
                    "\(path) may be read by others (mode \(String(st.st_mode & 0o7777, radix: 8))) and cannot be made private: "
                        + ownershipAdvice(path))
            }
        }
    }

    /// What to do about a store file this user cannot change.
    private static func ownershipAdvice(_ path: String) -> String {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_uid != geteuid() else { return "chmod 600 \(path)" }
        return "it belongs to uid \(st.st_uid): give it to the relay's user (chown), then chmod 600 \(path)"
    }

    /// Gives the files of the store in `dir` that root made to `owner`: root restoring the
    /// store of a relay that runs as another user. Each through the file opened, never
    /// following a link, and only a regular file root owns (made by the restore).
    static func giveStoreFiles(in dir: String, to owner: uid_t, group: gid_t) {
        for name in storeFiles {
            let fd = open(dir + "/" + name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == 0 else { continue }
            _ = fchown(fd, owner, group)
        }
    }
}
