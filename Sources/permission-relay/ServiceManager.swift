// What a service manager (systemd) hands the relay when it starts it: a listening socket
// (socket activation), a socket to report readiness on, and a journal to log to.

import CLISupport
import CSystem
import Foundation
import Glibc

enum ServiceManager {
    /// The listening socket passed as fd 3 (`LISTEN_FDS=1`, `LISTEN_PID` this process), and
    /// its path; nil when the relay was not started that way. The variables are removed,
    /// so that nothing the relay starts takes them for its own.
    static func inheritedSocket() throws -> (fd: Int32, path: String)? {
        let env = ProcessInfo.processInfo.environment
        guard let pid = env["LISTEN_PID"].flatMap(Int32.init), pid == getpid(), let count = env["LISTEN_FDS"].flatMap(Int.init)
        else { return nil }
        for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
        guard count == 1 else {
            throw CLIError.failure(
                "the service manager passed \(count) sockets; the relay listens on one (a single ListenStream= in its .socket unit)")
        }
        var path = [UInt8](repeating: 0, count: 110)
        let adopted = path.withUnsafeMutableBufferPointer { p in
            p.withMemoryRebound(to: CChar.self) { cs_adopt_listening_unix(3, $0.baseAddress, $0.count) }
        }
        guard adopted == 0 else {
            throw CLIError.failure(
                "the socket the service manager passed (fd 3) is not a listening Unix stream socket; use ListenStream=/PATH in the .socket unit"
            )
        }
        return (3, String(decoding: path.prefix { $0 != 0 }, as: UTF8.self))
    }

    /// Tells the service manager `state` (`READY=1`, `STOPPING=1`, `STATUS=…`) when it asked to
    /// be told (`NOTIFY_SOCKET`, with `Type=notify`); a failure is logged, not fatal.
    static func notify(_ state: String, log: (String) -> Void) {
        if cs_sd_notify(state) < 0 {
            log("could not notify the service manager (NOTIFY_SOCKET): \(String(cString: strerror(errno)))")
        }
    }

    /// The data directory systemd made for the service (`StateDirectory=`), if any.
    static var stateDirectory: String? {
        ProcessInfo.processInfo.environment["STATE_DIRECTORY"]?.split(separator: ":").first.map(String.init)
    }
}
