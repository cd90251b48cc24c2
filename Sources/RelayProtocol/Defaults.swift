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
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty { return run + "/permission-relay/relay.sock" }
        return "/tmp/permission-relay-\(getuid())/relay.sock"
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
        if env["PERMISSION_RELAY_SOCKET"].map({ !$0.isEmpty }) == true || exists(mine) || !exists(machineSocketPath) { return mine }
        return machineSocketPath
    }
}
