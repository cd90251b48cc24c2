// A copy of an app holds its default durable session while it runs, by a lock on a file
// beside the session's state file. A second copy running at the same time (two windows,
// or two centers of one app) takes the next free one, `<session>-2` and so on, with a
// state file of its own: were they to share the session, the relay would hand each event
// to whichever copy holds it at that moment, and a copy that lets a response go by as not
// its own would count it processed for the other too. A name given by the app
// (`PERMISSION_SESSION`, or the configuration's own) is used as it is.

import Foundation
import Glibc
import Synchronization

final class SessionClaim: Sendable {
    private let fd: Mutex<Int32>

    private init(fd: Int32) { self.fd = Mutex(fd) }

    /// Copies of one app on one host that may run at once, each with a session of its own;
    /// past them, a copy shares the first session (and the relay lets one hold it at a time).
    static let copies = 16

    /// `config` with the first session of its copies no other copy holds, and the claim
    /// on it; `config` as it is (no claim) when no lock can be had where its state is kept.
    static func take(_ config: RelayConfiguration) -> (RelayConfiguration, SessionClaim?) {
        guard let base = config.session, let state = config.stateFile else { return (config, nil) }
        let dir = (state as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for copy in 1...copies {
            let suffix = copy == 1 ? "" : "-\(copy)"
            let session = String(base.prefix(64 - suffix.count)) + suffix
            let fd = open(dir + "/\(config.member).\(session).lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            guard fd >= 0 else { return (config, nil) }
            let held = flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno
            if held == 0 {
                var claimed = config
                claimed.session = session
                claimed.stateFile = dir + "/\(config.member).\(session).state"
                return (claimed, SessionClaim(fd: fd))
            }
            close(fd)
            guard held == EWOULDBLOCK else { return (config, nil) }
        }
        return (config, nil)
    }

    /// Lets the session go (a later copy, or center, may take it).
    func release() {
        fd.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    deinit { release() }
}
