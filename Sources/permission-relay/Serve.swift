// `permission-relay serve`: opens the store, takes the data directory's lock, binds
// the socket and runs the event loop until SIGTERM, SIGINT or SIGHUP.

import CLISupport
import CSystem
import Foundation
import Glibc
import RelayCore
import RelayHub
import RelayProtocol
import RelayServer
import RelayStore

enum Serve {
    static let usage = """
        OVERVIEW: Run the permission relay daemon.

        USAGE: permission-relay serve [options]

        OPTIONS:
          --socket PATH                    Unix socket to listen on
                                           (default: $PERMISSION_RELAY_SOCKET, else
                                           $XDG_RUNTIME_DIR/permission-relay/relay.sock, else
                                           /tmp/permission-relay-UID/relay.sock; started by
                                           systemd with a .socket unit, the socket it passes)
          --socket-mode MODE               The socket's permissions, in octal (default: 0600; 0666
                                           when root runs the relay, as for the machine's relay:
                                           any account may connect, and tokens, or the account a
                                           member is bound to, decide who it is; the directory
                                           the socket is in decides who reaches it too)
          --data DIR                       Data directory holding relay.db
                                           (default: $STATE_DIRECTORY under systemd, else
                                           $XDG_STATE_HOME/permission-relay, else
                                           ~/.local/state/permission-relay)
          --sync normal|full               normal survives a killed process; full also survives
                                           power loss (default: normal)
          --max-frame-bytes N              Largest frame accepted (default: 1048576)
          --heartbeat-seconds N            Ping silent connections after N seconds, close them
                                           after 3N (default: 15)
          --handshake-timeout-seconds N    Close connections without hello after N seconds (default: 5)
          --max-pending-per-child N        Pending questions per child, 0 = no limit (default: 256)
          --max-pending-bytes-per-child N  Size of a child's pending questions, avatars included,
                                           0 = no limit (default: room for 64 of the largest
                                           frames, 64 × (max-frame-bytes + 4 KiB): 64.25 MiB;
                                           none with --max-pending-per-child 0)
          --ask-rate-limit N               Sustained asks per second per child, in bursts of 2N,
                                           0 = off (default: 32)
          --max-connections N              Open connections at most (default: 4096)
          --max-output-bytes N             Unsent bytes per connection before it is dropped as a
                                           slow consumer (default: 16777216)
          --max-member-output-bytes N      Unsent bytes of all of one member's connections together
                                           before one that cannot take more is dropped
                                           (default: 67108864)
          --max-total-output-bytes N       Unsent bytes of all connections together, likewise
                                           (default: 536870912)
          --retention-seconds N            Keep events this long (default: 604800, 7 days)
          --max-questions-per-child N      Questions kept on disk per child; past it the oldest
                                           finished ones are forgotten (default: 10000)
          --max-question-bytes-per-child N Size of the questions kept on disk per child, avatars
                                           included; past it the oldest finished ones are
                                           forgotten (default: 67108864, 64 MiB)
          --max-sessions-per-member N      Durable sessions remembered per member; past it the
                                           least recently used closed one is forgotten,
                                           0 = no limit (default: 1024)
          --max-known-handles-per-child N  Handles a guardian's addKnownHandles may make a child
                                           keep (approvals add past it), 0 = no limit
                                           (default: 100000)
          --spin-microseconds N            While requests come in close together, poll up to N µs
                                           for the next before sleeping: lower latency, for a
                                           busy core while that lasts; 0 = always sleep
                                           (default: \(SpinPolicy.defaultMicroseconds), at most 10000)
          --hub URL                        Link the relay's families to their other devices
                                           through a NATS JetStream hub (nats://HOST:PORT, or
                                           nats://USER:PASSWORD@HOST:PORT): questions, answers,
                                           cancels and expiries go through it, and the first
                                           decision there wins everywhere (default:
                                           $PERMISSION_RELAY_HUB, which keeps a password out of
                                           the process list)
          --device NAME                    This device's name on the hub (default: the name it was
                                           paired as with `permission-relay device join`, else
                                           the host name)
          --log-level LEVEL                debug, info, warning or error (default: info)
          -h, --help                       Show this help.

        EXAMPLES:
          permission-relay serve
          permission-relay serve --socket /tmp/relay.sock --data /tmp/relay-data --sync full
          permission-relay serve --hub nats://hub.home.arpa:4222 --device laptop
        """

    /// The unit of the bounds on flags in seconds (a day; ten years for the retention):
    /// times are kept in milliseconds, which such values keep far from overflowing.
    static let dayInSeconds = 86_400

    static let valueFlags: Set<String> = [
        "--socket", "--socket-mode", "--data", "--sync", "--max-frame-bytes", "--heartbeat-seconds", "--handshake-timeout-seconds",
        "--max-pending-per-child", "--max-pending-bytes-per-child", "--ask-rate-limit", "--max-connections", "--max-output-bytes",
        "--max-member-output-bytes", "--max-total-output-bytes",
        "--retention-seconds", "--log-level", "--max-questions-per-child", "--spin-microseconds",
        "--max-sessions-per-member", "--max-question-bytes-per-child", "--max-known-handles-per-child", "--hub", "--device",
    ]

    static func run(_ args: [String]) throws {
        // A stop asked for while the relay starts (loading a large store takes seconds) waits
        // until it serves, which then stops cleanly at once: exit 0, as at any other time,
        // rather than the signal's default end in the middle of opening the store.
        _ = cs_block_stop_signals()
        let a = try Arguments(args, valueFlags: valueFlags, switchFlags: [])
        _ = try a.expectPositionals([])
        let inherited = try ServiceManager.inheritedSocket()
        if inherited != nil, a.value("--socket") != nil {
            throw CLIError.usage("--socket is for a relay that binds its own socket; this one was given one (socket activation)")
        }
        let socket = inherited?.path ?? a.value("--socket") ?? Paths.defaultSocket
        let dataOption = a.value("--data") ?? ServiceManager.stateDirectory ?? Paths.defaultData
        guard let sync = SyncMode(rawValue: a.value("--sync") ?? "normal") else {
            throw CLIError.usage("--sync must be normal or full")
        }
        let levelName = a.value("--log-level") ?? "info"
        guard let level = LogLevel.allCases.first(where: { $0.name == levelName }) else {
            throw CLIError.usage("--log-level must be debug, info, warning or error")
        }
        var core = CoreConfig()
        core.version = programVersion
        core.maxFrameBytes = try a.int("--max-frame-bytes", default: core.maxFrameBytes, min: 64, max: 1 << 30)
        core.heartbeatSeconds = try a.int("--heartbeat-seconds", default: core.heartbeatSeconds, min: 1, max: Self.dayInSeconds)
        core.maxPendingPerChild = try a.int("--max-pending-per-child", default: core.maxPendingPerChild)
        // No limit on their number is none on their size either, unless that is given.
        core.maxPendingBytesPerChild = try a.int(
            "--max-pending-bytes-per-child",
            default: core.maxPendingPerChild == 0 ? 0 : CoreConfig.pendingBytesFor64(maxFrameBytes: core.maxFrameBytes))
        core.askRateLimit = try a.double("--ask-rate-limit", default: core.askRateLimit)
        core.retentionSeconds = Int64(
            try a.int("--retention-seconds", default: Int(core.retentionSeconds), min: 1, max: 3650 * Self.dayInSeconds))
        core.maxSessionsPerMember = try a.int("--max-sessions-per-member", default: core.maxSessionsPerMember, min: 0)
        core.maxKnownHandlesPerChild = try a.int(
            "--max-known-handles-per-child", default: core.maxKnownHandlesPerChild, min: 0)
        core.relayUID = getuid()
        var server = ServerConfig(socketPath: socket)
        // Root's relay is the machine's, for every account as its systemd socket is (a token,
        // or the account itself, decides who connects as whom); a user's is for that user.
        server.socketMode = geteuid() == 0 ? 0o666 : 0o600
        if let text = a.value("--socket-mode") {
            if inherited != nil { throw CLIError.usage("--socket-mode is for a socket the relay makes; the service manager made this one") }
            guard let mode = mode_t(text, radix: 8), mode <= 0o777, mode & 0o600 == 0o600 else {
                throw CLIError.usage(
                    "--socket-mode must be octal permissions that let the relay's own user read and write, such as 0600 or 0660, not \"\(text)\""
                )
            }
            server.socketMode = mode
        }
        server.inheritedListener = inherited?.fd
        server.questionsKept.count = try a.int("--max-questions-per-child", default: server.questionsKept.count, min: 1)
        server.questionsKept.bytes = try a.int(
            "--max-question-bytes-per-child", default: server.questionsKept.bytes, min: 1)
        if let hub = a.value("--hub") ?? ProcessInfo.processInfo.environment["PERMISSION_RELAY_HUB"].flatMap({ $0.isEmpty ? nil : $0 }) {
            guard hub.split(separator: ",").allSatisfy(isHubAddress) else {
                throw CLIError.usage("--hub must be a NATS address, such as nats://hub.home.arpa:4222 (a port from 1 to 65535)")
            }
            if let device = a.value("--device"), !Identifier.isValid(device) {
                throw CLIError.usage("--device must be 1 to 64 letters, digits, '.', '_' or '-'")
            }
            server.hubURL = hub
        } else if a.value("--device") != nil {
            throw CLIError.usage("--device names this device on a hub: it goes with --hub")
        }
        server.handshakeTimeoutSeconds = try a.double(
            "--handshake-timeout-seconds", default: server.handshakeTimeoutSeconds, min: 0.1, max: Double(Self.dayInSeconds))
        server.maxConnections = try a.int("--max-connections", default: server.maxConnections, min: 1)
        server.maxOutputBytes = try a.int("--max-output-bytes", default: server.maxOutputBytes, min: 65536)
        server.maxMemberOutputBytes = try a.int("--max-member-output-bytes", default: server.maxMemberOutputBytes, min: 65536)
        server.maxTotalOutputBytes = try a.int("--max-total-output-bytes", default: server.maxTotalOutputBytes, min: 65536)
        server.spinMicroseconds = try a.int("--spin-microseconds", default: server.spinMicroseconds, min: 0)
        guard server.spinMicroseconds <= 10_000 else {
            throw CLIError.usage("--spin-microseconds must be at most 10000 (10 ms); beyond that, sleeping costs less")
        }
        guard server.maxOutputBytes >= 2 * core.maxFrameBytes else {
            throw CLIError.usage("--max-output-bytes must be at least twice --max-frame-bytes (\(2 * core.maxFrameBytes))")
        }
        core.replayBudgetBytes = min(core.replayBudgetBytes, server.maxOutputBytes / 4)
        core.listReplyBytes = min(core.listReplyBytes, server.maxOutputBytes / 4 * 3)
        // Prune every second (events listed in memory until then), and often enough that
        // none outlives the retention window by much.
        server.pruneIntervalSeconds = min(1, max(0.25, Double(core.retentionSeconds) / 4))

        let log = Log.stderr(level: level)
        umask(0o077)  // the socket and the database (with its WAL) are private to this user
        // Before anything is made: a relay refused for a socket in use leaves no store behind.
        if inherited == nil {
            guard !socket.isEmpty && socket.utf8.count <= ServerConfig.maxSocketPathBytes else {
                throw CLIError.failure(
                    "the socket path is \(socket.isEmpty ? "empty" : "too long (\(socket.utf8.count) bytes, at most \(ServerConfig.maxSocketPathBytes))"): choose a shorter --socket"
                )
            }
            if RelayServer.isServed(socket) { throw CLIError.failure(RelayServer.servedAlready(socket)) }
            if errno == EACCES {
                throw CLIError.failure(
                    "\(socket) cannot be reached (permission denied): choose another --socket, or one in a directory you may use")
            }
        }
        let data = try Paths.makePrivateDirectory(dataOption)
        server.dataDirectory = data
        if server.hubURL != nil, let warning = try linkDevice(data: data, named: a.value("--device"), &server, &core) {
            log(.warning, warning)
        }
        try Paths.checkStoreFiles(in: data, owner: geteuid())
        if inherited == nil {
            let socketDirectory = (socket as NSString).deletingLastPathComponent
            try Paths.makePrivateDirectory(
                socketDirectory.isEmpty ? FileManager.default.currentDirectoryPath : socketDirectory, forSocket: true)
        }
        let lock = try lockDataDirectory(data)
        defer { Glibc.close(lock) }

        let limit = Int(cs_raise_fd_limit())
        if server.maxConnections + 64 > limit {
            log(
                .warning,
                "the open-file limit is \(limit); --max-connections \(server.maxConnections) may not be reachable"
                    + " (connections past what it allows are told busy)")
        }

        let store: SQLiteStore
        let relay: RelayServer
        do {
            store = try SQLiteStore(path: data + "/relay.db", sync: sync)
            relay = try RelayServer(config: server, coreConfig: core, store: store, log: log)
        } catch {
            throw CLIError.failure(Store.openingFailure(error, data: data))
        }
        do {
            try relay.run {
                let listening = "listening on \(Paths.absolute(socket))"
                let given = inherited == nil ? "" : ", the socket from the service manager"
                // A daemon serves whether or not anyone reads this line, which scripts wait for
                // in one form: `listening on SOCKET (…)`.
                _ = writeOut("permission-relay: \(listening) (data \(data), sync \(sync.rawValue)\(given))")
                ServiceManager.notify("READY=1\nSTATUS=\(listening)\(given)\nMAINPID=\(getpid())") { log(.warning, $0) }
            }
        } catch {
            throw CLIError.failure("\(error)")
        }
        ServiceManager.notify("STOPPING=1") { log(.warning, $0) }
        // Stopped cleanly: everything is committed and every connection closed. The WAL is
        // moved into the database, so a copy of relay.db alone is whole; then leave rather
        // than take apart, one by one, the up to millions of questions remembered.
        do {
            try store.checkpoint()
        } catch {
            log(.warning, "could not move the WAL into relay.db (what was committed is in relay.db-wal, kept): \(error)")
        }
        exit(0)
    }

    /// `nats://` or `tls://`, a host, and a port if any within 1…65535 (libnats takes a list
    /// of them, separated by commas).
    static func isHubAddress(_ address: Substring) -> Bool {
        guard let scheme = ["nats://", "tls://"].first(where: { address.hasPrefix($0) }) else { return false }
        let hostPort = address.dropFirst(scheme.count).split(separator: "@").last ?? ""
        guard !hostPort.isEmpty, !hostPort.hasPrefix(":") else { return false }
        guard !hostPort.hasSuffix("]"), let colon = hostPort.lastIndex(of: ":") else { return true }  // no port: the default
        return Int(hostPort[hostPort.index(after: colon)...]).map { (1...65535).contains($0) } ?? false
    }

    /// This device on the hub: as paired (`device join` wrote its credentials into the data
    /// directory: its name and one family), else named by --device or the host name, for a
    /// hub open to the devices that reach it. Returns what to warn of, if anything.
    static func linkDevice(data: String, named: String?, _ server: inout ServerConfig, _ core: inout CoreConfig) throws -> String? {
        let path = HubPaths.credentials(data: data)
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            core.hubDevice = named ?? ProcessInfo.processInfo.hostName
            guard Identifier.isValid(core.hubDevice ?? "") else {
                throw CLIError.usage("the host name is not a device name: give one with --device NAME")
            }
            // A device key without credentials: pairing was begun, or its credentials were lost.
            guard FileManager.default.fileExists(atPath: HubPaths.deviceKeyPath(data: data)) else { return nil }
            return "\(path) is missing, though this device has a key for pairing (\(HubPaths.deviceKeyPath(data: data))):"
                + " linking as \(core.hubDevice ?? "") to a hub open to all; if this device was paired, pair it again"
                + " (permission-relay device add, then device join)"
        }
        let jwt: HubJWT
        do {
            jwt = try HubCredentials.jwt(in: text)
        } catch {
            throw CLIError.failure("\(path) is damaged (\(error)): pair this device again (permission-relay device add)")
        }
        guard let family = jwt.family else { throw CLIError.failure("\(path) names no family: pair this device again") }
        // Another device's credentials copied here would have two relays link as one device.
        let keyPath = HubPaths.deviceKeyPath(data: data)
        if let seed = try? String(contentsOfFile: keyPath, encoding: .utf8), let key = try? NKey(seed: seed),
            key.publicKey != jwt.subject
        {
            throw CLIError.failure(
                "\(path) is \(jwt.name)'s, not this device's (whose key is \(keyPath)): pair this device with its own"
                    + " (permission-relay device key, device add, then device join) rather than copy another's")
        }
        if let named, named != jwt.name {
            throw CLIError.usage("this device was paired as \(jwt.name) (\(path)): --device must be that name, or be left out")
        }
        core.hubDevice = jwt.name
        core.hubFamilies = [family]
        server.hubCredentials = path
        return nil
    }

    /// Takes an exclusive lock on DATA/relay.lock so two relays never share a store.
    static func lockDataDirectory(_ dir: String) throws -> Int32 {
        let path = dir + "/relay.lock"
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            let why = String(cString: strerror(errno))
            switch errno {
            case EACCES: throw CLIError.failure("cannot open \(path): \(why); let this user write to \(dir) (chmod 700 \(dir))")
            case EROFS: throw CLIError.failure("cannot open \(path): \(why); choose a data directory on a writable file system (--data)")
            default: throw CLIError.failure("cannot open \(path): \(why)")
            }
        }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            Glibc.close(fd)
            throw CLIError.failure("a relay is already serving the data directory \(dir); stop it first")
        }
        return fd
    }
}
