// What permission-child and permission-guardian share: the identity options, the
// environment they fall back to, and how results are printed.

import CLISupport
import CSystem
import Foundation
import PermissionKit
import RelayProtocol
import Synchronization

/// `--socket`, `--member`, `--token`, `--credentials`, `--session`, `--state-dir`.
public enum ClientOptions {
    public static let valueFlags: Set<String> = ["--socket", "--member", "--token", "--credentials", "--session", "--state-dir"]

    public static let help = """
          --socket PATH        The relay's socket (env PERMISSION_RELAY_SOCKET; default: \(RelayConfiguration.defaultSocketPath))
          --member ID          Who this client is (env PERMISSION_MEMBER)
          --token TOKEN        The member's token (env PERMISSION_TOKEN); none for a member bound to your
                               Unix account (`permission-relay member add … --unix-user`)
          --credentials FILE   A file {"member": …, "token": …}, as `permission-relay member add …
                               --credentials FILE` writes it (env PERMISSION_CREDENTIALS)
          --session NAME       Durable session: where the relay keeps this command's place in the member's
                               events (env PERMISSION_SESSION; default: one per program and command,
                               MEMBER-HOSTNAME-PROGRAM, and -2, -3, … for copies running at once).
                               Two clients given one name take it from each other
          --state-dir DIR      Where the last processed event is kept (env PERMISSION_STATE_DIR)
          -h, --help           Show this help.
          --version            Print the version.
        """

    /// The configuration from the options, falling back to the environment; `app` names the
    /// default durable session (one per program and command, so that two of them never take
    /// it from each other). A command that only sends requests takes its `ephemeral` form.
    public static func configuration(_ a: Arguments, app: String) throws -> RelayConfiguration {
        var env = ProcessInfo.processInfo.environment
        if let v = a.value("--socket") { env["PERMISSION_RELAY_SOCKET"] = v }  // never empty (Arguments)
        if let v = a.value("--member") { env["PERMISSION_MEMBER"] = v }
        if let v = a.value("--token") { env["PERMISSION_TOKEN"] = v }
        if let v = a.value("--credentials") {
            env["PERMISSION_CREDENTIALS"] = v
            if a.value("--member") == nil { env["PERMISSION_MEMBER"] = nil }
            if a.value("--token") == nil { env["PERMISSION_TOKEN"] = nil }
        }
        if let v = a.value("--session") { env["PERMISSION_SESSION"] = v }
        if let v = a.value("--state-dir") { env["PERMISSION_STATE_DIR"] = v }
        if let session = env["PERMISSION_SESSION"], !session.isEmpty, !Identifier.isValid(session) {
            throw CLIError.usage("--session (or PERMISSION_SESSION) must match [A-Za-z0-9._-]{1,64}, not \"\(session)\"")
        }
        do {
            var config = try RelayConfiguration.fromEnvironment(env, app: app)
            config.requestTimeout = .seconds(3)  // a person at a terminal wants a quick answer when the relay is down
            if let file = env["PERMISSION_CREDENTIALS"], !file.isEmpty { warnIfOthersMayRead(file, member: config.member) }
            return config
        } catch AskError.systemError(ClientError.missingCredentials) {
            throw CLIError.usage(
                "say who you are: --credentials FILE (or PERMISSION_CREDENTIALS), --member and --token, or --member alone for the"
                    + " member bound to your Unix account")
        } catch AskError.systemError(let e) {
            throw CLIError.failure("\(e)")
        } catch {
            throw CLIError.failure("\(error)")
        }
    }

    /// Says so when others than its owner may read the credentials file: they could act as
    /// the member with its token (`permission-relay member add --credentials` makes it 0600).
    private static func warnIfOthersMayRead(_ file: String, member: String) {
        var st = stat()
        guard stat(file, &st) == 0, st.st_mode & 0o044 != 0 else { return }
        printErr(
            "\(programName): warning: \(file) can be read by other users, who could act as \(member) with its token;"
                + " make it private: chmod 600 \(file)")
    }

    /// `config`, checked for a command that keeps its place in the member's events: where
    /// its state file goes must be writable, or a watch started again would show events
    /// again and each ask would take the watch's session.
    public static func durable(_ config: RelayConfiguration) throws -> RelayConfiguration {
        guard let path = config.stateFile else { return config }
        let dir = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // The directory, or where it could not be made: the nearest directory above it that is there.
        var place = dir
        var isDirectory: ObjCBool = false
        while !FileManager.default.fileExists(atPath: place, isDirectory: &isDirectory) && !place.isEmpty && place != "/" {
            place = (place as NSString).deletingLastPathComponent
        }
        let it = place == dir ? "it" : place
        let why: String
        if !isDirectory.boolValue {
            why = "\(it) is a file, not a directory"
        } else if access(place, W_OK) != 0 {
            let reason = String(cString: strerror(errno))
            why = place == dir ? reason : "\(place) is not writable (\(reason))"
        } else if place == dir {
            return config
        } else {
            why = "it could not be made"
        }
        throw CLIError.failure(
            "cannot keep this client's place in the relay's events in \(dir): \(why); choose a writable --state-dir (or PERMISSION_STATE_DIR)"
        )
    }

    /// One clear line for an error of the library or the relay (a relay's message may
    /// quote what the child's side wrote, such as a choice's title). `unreachableBecause`:
    /// why the last attempt to connect failed, when the client is not connected.
    public static func describe(_ error: any Error, unreachableBecause reason: ClientError? = nil) -> String {
        switch error {
        case let e as RelayError where e.code == "forbidden":
            // "questions is for a child, and sam is a guardian": the request is the program's
            // business, the member's role is the user's.
            if let and = e.message.range(of: ", and ", options: .backwards) {
                let who = e.message[and.upperBound...]
                for (role, other) in [("guardian", "child"), ("child", "guardian")] where who.hasSuffix(" is a \(role)") {
                    return terminalSafe(
                        "\(who): this command is a \(other)'s (a \(role) uses permission-\(role); are these the credentials you meant?)")
                }
            }
            return terminalSafe(e.description) + " (are these the credentials you meant to use?)"
        case let e as RelayError: return terminalSafe(e.description)
        case AskError.notAvailable:
            let hint = " (is `permission-relay serve` running, and is --socket right?)"
            switch reason {
            case nil: return "the relay is not available" + hint
            case .unavailable(let why)? where why.hasPrefix("cannot connect to"):  // it says what to check
                return "the relay is not available: \(terminalSafe(why))"
            case .unavailable(let why)?: return "the relay is not available: \(terminalSafe(why))" + hint
            case let other?: return "the relay is not available: \(terminalSafe(other.description))"  // it answered, and said why
            }
        case AskError.systemError(let e as ClientError):
            if case .unauthorized = e { return refusal(e) }
            return e.description
        case AskError.systemError(let underlying): return "\(underlying)"
        case let e as AskError: return e.errorDescription ?? "\(e)"
        default: return "\(error)"
        }
    }
}

/// Parses `phone:+1 555 0100`, `email:kim@example.org`, `custom:kim42`, or a bare value
/// (with `@`: e-mail; digits and + ( ) - . space only: phone; else custom). Another
/// `word:` prefix is a usage error rather than part of a custom handle: `fax:12345` is
/// more likely a mistake than an app's id.
public func parseHandle(_ text: String) throws -> CommunicationHandle {
    let prefixes: [(String, CommunicationHandle.Kind)] = [("phone:", .phoneNumber), ("email:", .emailAddress), ("custom:", .custom)]
    for (p, kind) in prefixes where text.hasPrefix(p) {
        return CommunicationHandle(value: String(text.dropFirst(p.count)), kind: kind)
    }
    if let colon = text.firstIndex(of: ":"), !text[..<colon].isEmpty, text[..<colon].allSatisfy({ $0.isASCII && $0.isLetter }) {
        throw CLIError.usage(
            "unknown kind of handle \"\(text[...colon])\" in \"\(text)\": write phone:…, email:… or custom:… (custom:\(text) for an app's own id)"
        )
    }
    if text.contains("@") { return CommunicationHandle(value: text, kind: .emailAddress) }
    if !text.isEmpty && text.allSatisfy({ $0.isNumber || "+()-. ".contains($0) }) {
        return CommunicationHandle(value: text, kind: .phoneNumber)
    }
    return CommunicationHandle(value: text, kind: .custom)
}

/// `Kim Lee (+1 555 0100), kim@example.org`.
public func describePeople(_ topic: CommunicationTopic) -> String {
    topic.personInformation.map { p in
        let name = [p.nameComponents?.givenName, p.nameComponents?.familyName].compactMap { $0 }.joined(separator: " ")
        return name.isEmpty ? p.handle.value : "\(name) (\(p.handle.value))"
    }.joined(separator: ", ")
}

/// `12m 05s`, `3h 02m`, or `expired`.
public func timeLeft(until date: Date?, now: Date = Date()) -> String {
    guard let date else { return "no expiry" }
    let s = Int(date.timeIntervalSince(now).rounded(.down))
    if s <= 0 { return "expired" }
    if s >= 3600 { return String(format: "%dh %02dm", s / 3600, s % 3600 / 60) }
    return String(format: "%dm %02ds", s / 60, s % 60)
}

/// Reads `30s`, `10m`, `2h`, `1d` or an RFC 3339 instant.
public func parseExpiry(_ text: String, now: Date = Date()) -> Date? {
    let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
    if let u = text.last, let f = units[u], let n = Double(text.dropLast()), n > 0 {
        return now.addingTimeInterval(n * f)
    }
    let iso = ISO8601DateFormatter()
    iso.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
    if let d = iso.date(from: text) { return d }
    iso.formatOptions = [.withInternetDateTime]
    return iso.date(from: text)
}

/// `text` as it may go to a terminal: each character a terminal would act on instead of
/// show — controls, with which escape sequences begin, and the marks that reorder text
/// (either could make a question read as another) — is shown as U+FFFD. Questions come
/// from the child's side, and a guardian reads them to decide.
public func terminalSafe(_ text: String) -> String {
    func unsafe(_ u: Unicode.Scalar) -> Bool {
        switch u.value {
        case 0..<0x20, 0x7F...0x9F, 0x061C, 0x200E, 0x200F, 0x2028...0x202E, 0x2066...0x2069: true
        default: false
        }
    }
    guard text.unicodeScalars.contains(where: unsafe) else { return text }
    return String(String.UnicodeScalarView(text.unicodeScalars.map { unsafe($0) ? "\u{FFFD}" : $0 }))
}

/// What a long-running command says when another client takes its session.
public let replacedNotice =
    "another client opened this session (same member and --session); this one connects again in a while."
    + " Give each client a --session of its own."

/// What a command says when the relay refuses its credentials: the relay's reason, and
/// what may be wrong.
public func refusal(_ error: ClientError?) -> String {
    let said = error?.description ?? "the relay refused the credentials"
    if case .unauthorized(let why)? = error, why.contains("bound to this Unix account") {
        // No token was given: the member was to be known by the account.
        return "\(said); check --member, or give credentials (--credentials FILE) if the member has a token"
    }
    if case .unauthorized(let why)? = error, why.contains("says hello only as that member") {
        return said  // the account speaks for its member alone: no token changes that
    }
    if case .unauthorized(let why)? = error, why.hasSuffix("rotated: use the new one)") || why.hasSuffix("removed from its family)") {
        return said  // the relay said why as it closed the connection
    }
    return "\(said); check the member and token: a rotated token or a removed member is refused"
        + " (`permission-relay token rotate MEMBER` issues a new token)"
}

/// For a command that waits for events: says on stderr when the relay cannot be reached
/// (once, with the reason `why` gives, until it is reached again, which it also says) and
/// when another client takes this one's session again within a minute (the library pauses
/// before it connects again). A refusal of the credentials ends the center's streams; the
/// command then says so with `refusal`.
public func reportConnectionTrouble(
    _ states: AsyncStream<ConnectionState>, program: String, why: @escaping @Sendable () -> ClientError?
) -> Task<Void, Never> {
    Task {
        var lastReplaced: ContinuousClock.Instant?
        var unreachable = false
        var connected = false
        for await state in states {
            switch state {
            case .unavailable where !unreachable:
                unreachable = true
                printErr("\(program): \(why()?.description ?? "the relay is not available"); still trying")
            case .ready:
                if unreachable { printErr("\(program): connected to the relay\(connected ? " again" : "")") }
                (unreachable, connected) = (false, true)
            case .replaced:
                let now = ContinuousClock.now
                if let last = lastReplaced, now - last < .seconds(60) { printErr("\(program): \(replacedNotice)") }
                lastReplaced = now
            default: break
            }
        }
    }
}

/// What a program says when the family's other devices are out of reach (the relay is
/// linked to a family hub it cannot reach now, or that no longer trusts this device), so
/// that a wait is not taken for a guardian's: `thing` is what waits ("the question",
/// "the answer").
public func waitingForDevices(_ thing: String, _ link: FamilyLink) -> String {
    link.trusted
        ? "waiting for the family's other devices: the hub is out of reach from this device, and \(thing) goes out when it is back"
        : "waiting for the family's other devices: the family hub no longer trusts this device (it was removed), and \(thing)"
            + " goes out once it is paired again (permission-relay device add, then device join)"
}

/// While `watched` runs: says on stderr (`program: …`) when the family's other devices
/// are out of reach, and when they are reachable again, looking every `every` (a link has
/// no event of its own for clients). Ends when cancelled.
public func reportFamilyLink(
    program: String, _ thing: String, every: Duration = .seconds(2), _ link: @escaping @Sendable () async throws -> FamilyLink?
) -> Task<Void, Never> {
    Task {
        var down = false
        while !Task.isCancelled {
            if let l = try? await link() {
                if !l.connected && !down { printErr("\(program): \(waitingForDevices(thing, l))") }
                if l.connected && down { printErr("\(program): the family's other devices are reachable again") }
                down = !l.connected
            }
            try? await Task.sleep(for: every)
        }
    }
}

/// Ends the program on SIGINT, SIGTERM or SIGHUP with status 128 + the signal (130, 143,
/// 129), as shells report a program a signal stopped, once `cleanup` (given the signal) has
/// run: a long-running command records what it processed, an interrupted wait says what
/// stays pending. A second signal ends the program at once. The command's own work ends too
/// as `cleanup` closes its center: it calls `holdIfStopping` before it reports anything, so
/// that the signal's status and words are the ones the user sees.
///
/// The handler is in place when this returns (a signal handed to a Dispatch source in the
/// meantime would be lost while the source registers), and it writes each signal's number
/// to a pipe, which keeps it until it is read.
public func stopOnSignals(_ cleanup: @escaping @Sendable (Int32) async -> Void) -> SignalStop {
    let stop = SignalStop()
    var fds: [Int32] = [-1, -1]
    guard cs_pipe(&fds) == 0, cs_route_signals(fds[1]) == 0 else { return stop }  // the default actions stay
    signal(SIGPIPE, SIG_DFL)  // cs_route_signals ignores it, for the relay; a command whose reader left just ends
    let readEnd = fds[0]
    let (signals, feed) = AsyncStream<Int32>.makeStream()
    let reader = Thread {
        var byte: UInt8 = 0
        while true {
            var p = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, -1) >= 0 || errno == EINTR else { return }
            while read(readEnd, &byte, 1) == 1 { feed.yield(Int32(byte)) }
        }
    }
    reader.name = "signals"
    reader.start()
    Task {
        for await sig in signals {
            switch stop.received() {
            case .cleanUp:
                Task {
                    await cleanup(sig)
                    exit(128 + sig)
                }
            case .ignore: continue
            case .exitNow: exit(128 + sig)
            }
        }
    }
    return stop
}

/// Who ends the program: a signal's handler, or the command itself (see `stopOnSignals`).
public final class SignalStop: Sendable {
    private enum State {
        case running, stopping
        /// The command has ended and is reporting; signals seen since.
        case ending(Int)
    }

    enum Action { case cleanUp, ignore, exitNow }

    private let state = Mutex(State.running)

    /// What a signal does now: the first one while the command runs cleans up and ends it;
    /// one while it is already ending is ignored (it is about to exit with its own status),
    /// unless a second one insists; any other ends the program at once.
    fileprivate func received() -> Action {
        state.withLock { s in
            switch s {
            case .running:
                s = .stopping
                return .cleanUp
            case .ending(0):
                s = .ending(1)
                return .ignore
            case .stopping, .ending: return .exitNow
            }
        }
    }

    /// Claims the end for the command, which then reports and exits with its own status
    /// (claiming again is harmless); when a signal's handler claimed it first, waits for
    /// that to end the program.
    public func claimEnd() async {
        let mine = state.withLock { s in
            switch s {
            case .running:
                s = .ending(0)
                return true
            case .ending: return true
            case .stopping: return false
            }
        }
        guard !mine else { return }
        while true { try? await Task.sleep(for: .seconds(1)) }
    }
}
