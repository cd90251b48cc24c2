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
}
