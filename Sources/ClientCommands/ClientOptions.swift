// What permission-child and permission-guardian share: the identity options, the
// environment they fall back to, and how results are printed.

import CLISupport
import Foundation
import PermissionKit
import RelayProtocol

/// `--socket`, `--member`, `--token`, `--credentials`, `--session`, `--state-dir`.
public enum ClientOptions {
    public static let valueFlags: Set<String> = ["--socket", "--member", "--token", "--credentials", "--session", "--state-dir"]

    public static let help = """
          --socket PATH        The relay's socket (env PERMISSION_RELAY_SOCKET; default: \(RelayConfiguration.defaultSocketPath))
          --member ID          Who this client is (env PERMISSION_MEMBER)
          --token TOKEN        The member's token (env PERMISSION_TOKEN)
          --credentials FILE   A file {"member": …, "token": …}, as `permission-relay member add --json` prints it
                               (env PERMISSION_CREDENTIALS)
          --session NAME       Durable session: where the relay keeps this app's place in the member's
                               events, for watch, auto, the interactive view, --wait, and ask until the
                               session follows its topic (env PERMISSION_SESSION; default: MEMBER-HOSTNAME)
          --state-dir DIR      Where the last processed event is kept (env PERMISSION_STATE_DIR)
          -h, --help           Show this help.
          --version            Print the version.
        """

    /// The configuration from the options, falling back to the environment. (A command
    /// that only sends requests takes its `ephemeral` form, leaving the durable session to
    /// a `watch` beside it.)
    public static func configuration(_ a: Arguments) throws -> RelayConfiguration {
        var env = ProcessInfo.processInfo.environment
        if let v = a.value("--socket") { env["PERMISSION_RELAY_SOCKET"] = v }
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
            var config = try RelayConfiguration.fromEnvironment(env)
            config.requestTimeout = .seconds(3)  // a person at a terminal wants a quick answer when the relay is down
            return config
        } catch AskError.systemError(let e) {
            throw CLIError.failure("\(e)")
        } catch {
            throw CLIError.usage("say who you are: --member and --token, or --credentials FILE")
        }
    }

    /// `config`, checked for a command that keeps its place in the member's events: where
    /// its state file goes must be writable, or a watch started again would show events
    /// again and each ask would take the watch's session.
    public static func durable(_ config: RelayConfiguration) throws -> RelayConfiguration {
        guard let path = config.stateFile else { return config }
        let dir = (path as NSString).deletingLastPathComponent
        try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        guard access(dir, W_OK) == 0 else {
            throw CLIError.failure(
                "cannot keep this client's place in the relay's events in \(dir): \(String(cString: strerror(errno)));"
                    + " choose a writable --state-dir (or PERMISSION_STATE_DIR)")
        }
        return config
    }

    /// One clear line for an error of the library or the relay (a relay's message may
    /// quote what the child's side wrote, such as a choice's title). `unreachableBecause`:
    /// why the last attempt to connect failed, when the client is not connected.
    public static func describe(_ error: any Error, unreachableBecause reason: ClientError? = nil) -> String {
        switch error {
        case let e as RelayError: return terminalSafe(e.description)
        case AskError.notAvailable:
            let hint = " (is `permission-relay serve` running, and is --socket right?)"
            switch reason {
            case nil: return "the relay is not available" + hint
            case .unavailable(let why)?: return "the relay is not available: \(terminalSafe(why))" + hint
            case let other?: return "the relay is not available: \(terminalSafe(other.description))"  // it answered, and said why
            }
        case AskError.systemError(let underlying): return "\(underlying)"
        case let e as AskError: return e.errorDescription ?? "\(e)"
        default: return "\(error)"
        }
    }
}

/// Parses `phone:+1 555 0100`, `email:kim@example.org`, `custom:kim42`, or a bare value
/// (with `@`: e-mail; digits and + ( ) - . space only: phone; else custom).
public func parseHandle(_ text: String) -> CommunicationHandle {
    let prefixes: [(String, CommunicationHandle.Kind)] = [("phone:", .phoneNumber), ("email:", .emailAddress), ("custom:", .custom)]
    for (p, kind) in prefixes where text.hasPrefix(p) {
        return CommunicationHandle(value: String(text.dropFirst(p.count)), kind: kind)
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
    "another client opened this session (same member and --session, by default MEMBER-HOSTNAME); this one connects"
    + " again in a while. Give each client a --session of its own."

/// What a command says when the relay refuses its credentials: the relay's reason, and
/// what may be wrong.
public func refusal(_ error: ClientError?) -> String {
    "\(error?.description ?? "the relay refused the credentials"); check the member and token: a rotated token or a"
        + " removed member is refused (`permission-relay token rotate MEMBER` issues a new token)"
}

/// For a command that waits for events: says on stderr when the relay cannot be reached
/// (once, with the reason `why` gives, until it is reached again, which it also says),
/// when another client takes this one's session again within a minute (the library pauses
/// before it connects again; a one-off `ask` beside a `watch` takes it once, which is no
/// news), and ends the program with status 1 when the relay refuses the credentials (the
/// library has stopped).
public func reportConnectionTrouble(
    _ states: AsyncStream<ConnectionState>, program: String, why: @escaping @Sendable () -> ClientError?
) -> Task<Void, Never> {
    Task {
        var lastReplaced: ContinuousClock.Instant?
        var unreachable = false
        for await state in states {
            switch state {
            case .unavailable where !unreachable:
                unreachable = true
                printErr("\(program): \(why()?.description ?? "the relay is not available"); still trying")
            case .ready where unreachable:
                unreachable = false
                printErr("\(program): connected to the relay again")
            case .replaced:
                let now = ContinuousClock.now
                if let last = lastReplaced, now - last < .seconds(60) { printErr("\(program): \(replacedNotice)") }
                lastReplaced = now
            case .refused:
                printErr("\(program): \(refusal(why()))")
                exit(1)
            default: break
            }
        }
    }
}

/// Runs `cleanup` and exits 0 on SIGTERM or SIGINT, so a long-running command (watch,
/// auto) records what it processed before it goes. Keep the returned sources alive with
/// `withExtendedLifetime` until the command ends: once they are freed, the signals are
/// swallowed and the program no longer stops on them.
public func stopOnSignals(_ cleanup: @escaping @Sendable () async -> Void) -> [any DispatchSourceSignal] {
    [SIGTERM, SIGINT].map { sig in
        signal(sig, SIG_IGN)
        let source = DispatchSource.makeSignalSource(signal: sig, queue: .global())
        source.setEventHandler {
            Task {
                await cleanup()
                exit(0)
            }
        }
        source.resume()
        return source
    }
}
