// Where relay and clients meet when nobody says otherwise.

import Foundation

public enum RelayDefaults {
    /// `$PERMISSION_RELAY_SOCKET`, else `$XDG_RUNTIME_DIR/permission-relay/relay.sock`,
    /// else `/tmp/permission-relay-UID/relay.sock`.
    public static func socketPath(environment env: [String: String] = ProcessInfo.processInfo.environment) -> String {
        if let s = env["PERMISSION_RELAY_SOCKET"], !s.isEmpty { return s }
        if let run = env["XDG_RUNTIME_DIR"], !run.isEmpty { return run + "/permission-relay/relay.sock" }
        return "/tmp/permission-relay-\(getuid())/relay.sock"
    }
}
