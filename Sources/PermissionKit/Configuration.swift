// Where a client finds the relay and who it is: explicit values, or the environment
// (PERMISSION_RELAY_SOCKET, PERMISSION_MEMBER, PERMISSION_TOKEN or
// PERMISSION_CREDENTIALS, PERMISSION_SESSION, PERMISSION_STATE_DIR).

import Foundation
import RelayProtocol

/// How a client connects to the relay and keeps its place in the member's event stream.
public struct RelayConfiguration: Sendable {
    /// The relay's Unix socket.
    public var socketPath: String
    /// The member id this client acts as.
    public var member: String
    /// The member's token; empty for a member bound to the Unix account the app runs as
    /// (`permission-relay member add … --unix-user`), whom the relay knows by the account.
    public var token: String
    /// The durable session name (per app or device): the relay keeps its place in the
    /// member's event stream across connections, and replays what it missed. nil opens
    /// an ephemeral session instead, which sees events from each connection on only and
    /// takes no durable session from another client: for a client that only sends
    /// requests (a one-off command), set it and `stateFile` to nil.
    public var session: String?
    /// Where the last processed `seq` is kept between runs; nil keeps it in memory only.
    public var stateFile: String?
    /// How long a request waits for the relay (including reconnects) before it fails.
    public var requestTimeout: Duration = .seconds(10)
    /// Reconnect backoff: the first delay, doubling at each failed attempt; each wait gets
    /// ±25% jitter.
    public var reconnectDelay: Duration = .milliseconds(100)
    /// The longest the backoff grows to.
    public var maxReconnectDelay: Duration = .seconds(5)
    /// How long an acknowledgement of processed events may wait for a request to go out
    /// with: most events are soon followed by one (a guardian's answer, a child's next
    /// ask), and an ack that rides along spares the relay a read and a turn of its own.
    /// A longer delay only means that after a crash a few more events come again, which
    /// the app's place in the stream (`stateFile`) passes over. Closing sends it at once.
    public var ackDelay: Duration = RelayDefaults.ackDelay
    /// The app's default session and its state file, as the environment gave them: while
    /// `session` and `stateFile` are still those, each copy of the app running at once takes
    /// a session of its own (`SessionClaim`); one the app names is used as it is.
    var defaultPlace: (session: String, stateFile: String)?

    /// Whether each copy of the app takes a session of its own (see `defaultPlace`).
    var sessionPerCopy: Bool { defaultPlace.map { $0.session == session && $0.stateFile == stateFile } ?? false }

    /// A member's connection to the relay at `socketPath`; `session` names a durable
    /// session (nil: ephemeral), and `stateFile` keeps the app's place between runs.
    public init(socketPath: String, member: String, token: String, session: String?, stateFile: String? = nil) {
        self.socketPath = socketPath
        self.member = member
        self.token = token
        self.session = session
        self.stateFile = stateFile
    }

    /// This configuration with an ephemeral session and no state file: for a client that
    /// only sends requests, which then takes no durable session from another client.
    public var ephemeral: RelayConfiguration {
        var c = self
        (c.session, c.stateFile) = (nil, nil)
        return c
    }

    /// Whether this durable session already follows the responses of `topic`: an earlier
    /// run registered it (by asking, or by consuming responses), so the relay keeps them
    /// for the session whoever asks. A client that only asks can then do so on an
    /// ephemeral session, and leave the durable one to the app that watches it.
    public func sessionFollows<Topic: QuestionTopic>(_ topic: Topic.Type) -> Bool {
        session != nil && EventProgress(path: stateFile).topics.contains(Topic.id)
    }

    /// The relay's default socket for this user, as `permission-relay serve` chooses it, or
    /// the machine's relay's (`/run/permission-relay/relay.sock`) when only that one listens.
    public static var defaultSocketPath: String { RelayDefaults.clientSocketPath() }

    /// Reads the configuration from the environment.
    ///
    /// `PERMISSION_MEMBER` and `PERMISSION_TOKEN` name the member, or `PERMISSION_CREDENTIALS`
    /// names a JSON file `{"member": …, "token": …}` (what `permission-relay member add
    /// --credentials` writes); `PERMISSION_MEMBER` alone names a member bound to this Unix
    /// account. `PERMISSION_SESSION` defaults to `<member>-<hostname>-<app>`, a session of this
    /// app's own (`app`: the executable's name unless given); `PERMISSION_STATE_DIR` to
    /// `$XDG_STATE_HOME/permission-kit` or `~/.local/state/permission-kit`. Without credentials
    /// it throws `AskError.systemError` with `ClientError.missingCredentials`, which says
    /// where they are read from.
    public static func fromEnvironment(
        _ env: [String: String] = ProcessInfo.processInfo.environment, app: String = ProcessInfo.processInfo.processName
    ) throws(AskError) -> RelayConfiguration {
        do {
            return try result(env, app: app).get()
        } catch {
            throw AskError.systemError(underlyingError: error)
        }
    }

    /// `fromEnvironment`, with the reason it failed.
    static func result(_ env: [String: String], app: String = ProcessInfo.processInfo.processName) -> Result<
        RelayConfiguration, ClientError
    > {
        var member = env["PERMISSION_MEMBER"] ?? ""
        var token = env["PERMISSION_TOKEN"] ?? ""
        if let file = env["PERMISSION_CREDENTIALS"], !file.isEmpty {
            do {
                let creds = try readCredentials(file)
                member = member.isEmpty ? creds.member : member
                token = token.isEmpty ? creds.token : token
            } catch {
                return .failure(error)
            }
        }
        // A member without a token is one bound to this Unix account.
        switch (member.isEmpty, token.isEmpty) {
        case (true, true): return .failure(.missingCredentials("neither PERMISSION_CREDENTIALS nor PERMISSION_MEMBER is set"))
        case (true, false): return .failure(.missingCredentials("PERMISSION_TOKEN is set, PERMISSION_MEMBER is not"))
        default: break
        }
        let named = env["PERMISSION_SESSION"].flatMap { $0.isEmpty ? nil : $0 }
        let session = named ?? defaultSession(member: member, app: app)
        let stateDir = env["PERMISSION_STATE_DIR"].flatMap { $0.isEmpty ? nil : $0 } ?? defaultStateDirectory(env)
        if named == nil { takeOverLegacyState(member: member, into: stateDir + "/\(member).\(session).state", in: stateDir) }
        var config = RelayConfiguration(
            socketPath: RelayDefaults.clientSocketPath(environment: env),
            member: member, token: token, session: session,
            stateFile: stateDir + "/\(member).\(session).state")
        if named == nil { config.defaultPlace = (session, config.stateFile!) }
        return .success(config)
    }

    /// Reads `{"member": …, "token": …}` from a file.
    static func readCredentials(_ path: String) throws(ClientError) -> (member: String, token: String) {
        func failure(_ why: String) -> ClientError { ClientError.credentials(path, why: why) }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { throw failure("no such file") }
        guard !isDirectory.boolValue else { throw failure("it is a directory") }
        let data: Data
        do {
            data = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw failure(FileManager.default.isReadableFile(atPath: path) ? error.localizedDescription : "permission denied")
        }
        guard !data.isEmpty else { throw failure("it is empty") }
        guard let json = try? JSON.parse(Array(data)), let member = json["member"]?.string, let token = json["token"]?.string
        else { throw failure(#"expected {"member": …, "token": …}"#) }
        return (member, token)
    }

    /// `<member>-<host>-<app>`, in what the relay takes for a session name
    /// ([A-Za-z0-9._-]{1,64}): other characters (a host name's umlaut, say) would have it
    /// refuse the hello. A long name loses the end of its host part, never the app's.
    static func defaultSession(member: String, app: String, host: String = hostName()) -> String {
        func kept(_ s: String) -> String { s.filter { $0.isASCII && ($0.isLetter || $0.isNumber || "-._".contains($0)) } }
        let tail = "-" + String((kept(app).isEmpty ? "app" : kept(app)).prefix(40))
        let host = kept(host)
        let head = host.isEmpty ? member : "\(member)-\(host)"
        return String(head.prefix(64 - tail.count)) + tail
    }

    /// Before sessions were per app, every app of a member on a host shared the session
    /// `<member>-<host>`. A first run under the new name starts from that session's place
    /// (the state file says where; the relay replays from it with `resume`), so that what
    /// came while the app was away is not skipped. Each app takes a copy: events one app
    /// already processed may be shown by another again, never lost.
    static func takeOverLegacyState(member: String, into path: String, in dir: String, host: String = hostName()) {
        let kept = host.filter { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == ".") }
        let legacy = dir + "/\(member).\(String("\(member)-\(kept.isEmpty ? "app" : kept)".prefix(64))).state"
        guard legacy != path, !FileManager.default.fileExists(atPath: path), FileManager.default.fileExists(atPath: legacy) else { return }
        try? FileManager.default.copyItem(atPath: legacy, toPath: path)
    }

    static func hostName() -> String {
        var name = [UInt8](repeating: 0, count: 256)
        gethostname(&name, 255)
        return String(decoding: name.prefix { $0 != 0 }, as: UTF8.self)
    }

    static func defaultStateDirectory(_ env: [String: String]) -> String {
        RelayDefaults.baseDirectory("XDG_STATE_HOME", else: ".local/state", environment: env) + "/permission-kit"
    }
}

/// Failures of the connection underneath the API types.
public enum ClientError: Error, Sendable, CustomStringConvertible, LocalizedError {
    /// The relay could not be reached before the request's deadline.
    case unavailable(String)
    /// The relay refused the member or token.
    case unauthorized(String)
    /// The relay answered with an error.
    case relay(code: String, message: String)
    /// The credentials file at the path cannot be read, or is not `{"member":…,"token":…}`.
    case credentials(String, why: String)
    /// No credentials were given (the string says which part is missing).
    case missingCredentials(String)
    /// The client was closed.
    case closed

    public var description: String {
        switch self {
        case .unavailable(let why): return "the relay is not available: \(why)"
        case .unauthorized(let why): return "the relay refused the credentials: \(why)"
        case .relay(let code, let message): return "\(code): \(message)"
        case .credentials(let path, let why): return "cannot read credentials from \(path): \(why)"
        case .missingCredentials(let why):
            return
                "no credentials (\(why)): set PERMISSION_CREDENTIALS to the file `permission-relay member add … --credentials FILE` wrote,"
                + " or PERMISSION_MEMBER and PERMISSION_TOKEN (PERMISSION_MEMBER alone for a member bound to this Unix account)"
        case .closed: return "the client was closed"
        }
    }

    /// What `localizedDescription` says: the description.
    public var errorDescription: String? { description }
}
