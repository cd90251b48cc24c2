// Where relay and clients meet when nobody says otherwise.

import Foundation

public enum RelayDefaults {
    /// How long a client holds an ack back for a frame it sends to carry it: most events
    /// are followed within it by a request of the client's (a guardian's next answer, a
    /// child's next ask), and an ack that rides along costs the relay no read of its own.
    public static let ackDelay: Duration = .milliseconds(25)

    /// `$PERMISSION_RELAY_SOCKET`, else `$XDG_RUNTIME_DIR/permission-relay/relay.sock`,
    /// else `/tmp/permission-relay-UID/relay.sock`.
    public static func socketPath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let s = env["PERMISSION_RELAY_SOCKET"], !s.isEmpty { return s }
        if let run = env["XDG_RUNTIME_DIR"], run.hasPrefix("/") { return run + "/permission-relay/relay.sock" }
        return "/tmp/permission-relay-\(getuid())/relay.sock"
    }

    /// `$variable` when it is an absolute path, else `fallback` under the home directory: an
    /// XDG base directory, where a relative path is ignored, as the XDG specification asks
    /// (it would be taken from wherever the program happens to run).
    public static func baseDirectory(
        _ variable: String, else fallback: String, environment env: [String: String] = ProcessInfo.processInfo.environment
    ) -> String {
        if let dir = env[variable], dir.hasPrefix("/") { return dir }
        return homeDirectory(environment: env) + "/" + fallback
    }

    /// `$HOME` when it is an absolute path, else the account's home directory: an empty or
    /// relative `HOME` would put state under `/` or wherever the program runs.
    public static func homeDirectory(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let home = env["HOME"], home.hasPrefix("/") { return home }
        if let account = getpwuid(getuid()), let dir = account.pointee.pw_dir, dir.pointee == UInt8(ascii: "/") {
            return String(cString: dir)
        }
        return NSHomeDirectory()
    }

    /// The socket of the machine's relay (the system unit's): the family computer's.
    public static let machineSocketPath = "/run/permission-relay/relay.sock"

    /// Where a client looks for the relay: `socketPath`, unless nothing is there and the
    /// machine's relay listens, when it is the machine's: on the family computer a member's
    /// programs find the relay with no setting.
    public static func clientSocketPath(
        environment env: [String: String] = ProcessInfo.processInfo.environment, exists: (String) -> Bool = { access($0, F_OK) == 0 }
    ) -> String {
        let mine = socketPath(environment: env)
        if env["PERMISSION_RELAY_SOCKET"].map({ !$0.isEmpty }) == true || (exists(mine) && distrust(mine, environment: env) == nil)
            || !exists(machineSocketPath)
        {
            return mine
        }
        return machineSocketPath
    }

    /// Why a client must not connect to `path`: it is this user's default socket, and its
    /// directory belongs to another user or others may write to it, so that someone else
    /// could have put a relay of their own there, to catch tokens and admin requests (the
    /// /tmp fallback can be made by anyone). nil when it may; a path named on purpose is
    /// the user's choice.
    public static func distrust(_ path: String, environment env: [String: String] = ProcessInfo.processInfo.environment) -> String? {
        var own = env
        own["PERMISSION_RELAY_SOCKET"] = nil
        guard path == socketPath(environment: own) else { return nil }
        let dir = (path as NSString).deletingLastPathComponent
        var st = stat()
        guard stat(dir, &st) == 0 else { return nil }  // nothing there: connecting fails anyway
        if st.st_uid == geteuid() && st.st_mode & 0o022 == 0 { return nil }
        return "\(dir) belongs to uid \(st.st_uid), or others may write to it: another user could have put a relay of their own"
            + " there; remove it, or name the relay's socket (--socket or PERMISSION_RELAY_SOCKET)"
    }

    /// Why a connection to the socket at `path` failed with `error` (an errno), and what to
    /// check: for the programs, the library and the admin commands alike.
    public static func connectFailure(_ path: String, error: Int32) -> String {
        let start = "cannot connect to \(path)"
        var st = stat()
        switch error {
        case ENOENT:
            return "\(start): there is no socket there (is `permission-relay serve` running, and is this its socket?)"
        case ECONNREFUSED where stat(path, &st) == 0 && st.st_mode & S_IFMT != S_IFSOCK:
            let what = st.st_mode & S_IFMT == S_IFDIR ? "a directory" : "not a socket"
            return "\(start): it is \(what); give the relay's socket, as `permission-relay serve` prints it"
        case ECONNREFUSED:
            return "\(start): no relay listens there (is `permission-relay serve` running?)"
        case EACCES:
            return "\(start): permission denied (the socket, or a directory above it, does not let this user in): run as"
                + " a user the relay's socket lets in, or ask whoever runs the relay"
        default:
            return "\(start): \(String(cString: strerror(error)))"
        }
    }
}
