// How a relay server is set up, and how it is stopped.

import Glibc
import RelayProtocol
import RelayStore

/// Limits and timings of the reactor.
public struct ServerConfig: Sendable {
    public var socketPath: String
    /// The family hub to link to (`nats://HOST:PORT`), if any; this device's name is
    /// `CoreConfig.hubDevice`.
    public var hubURL: String?
    /// The NATS credentials file this device proves who it is with, for a hub where each
    /// family is an account of its own (`permission-relay device join` writes it).
    public var hubCredentials: String?
    /// The permissions of the socket file the relay makes; the directory it is in decides
    /// who reaches it too.
    public var socketMode: mode_t = 0o600
    public var maxConnections = 4096
    public var handshakeTimeoutSeconds = 5.0
    /// Bytes all connections that have not completed `hello` may have sent, unread,
    /// together: while the others hold that much, one holding more than a hello needs is
    /// read no further until they hold less (else its handshake times out), so that clients that announce large
    /// frames and never finish them cannot make the relay hold a frame's worth for each.
    public var maxHandshakeInputBytes = 64 << 20
    /// Bytes all connections past `hello` may have sent, not yet taken as requests,
    /// together (parts of frames, and whole ones waiting while a connection's replies are
    /// unread): likewise, one holding more than a hello needs is read no further while the
    /// others hold that much.
    public var maxInputBytes = 256 << 20
    /// Unsent bytes a connection may hold before it is dropped as a slow consumer.
    public var maxOutputBytes = 16 << 20
    /// Unsent bytes all connections of one member may hold together: past it, a connection
    /// of the member that cannot take more is dropped (many that never read would
    /// otherwise each hold `maxOutputBytes`).
    public var maxMemberOutputBytes = 64 << 20
    /// Unsent bytes all connections may hold together, likewise.
    public var maxTotalOutputBytes = 512 << 20
    /// How often retained events are pruned (and the oldest finished questions of the
    /// children past `questionsKept` forgotten).
    public var pruneIntervalSeconds = 1.0
    /// What the store keeps of each child's questions.
    public var questionsKept = QuestionsKept()
    /// How often cursors moved by acks are written (they may be stored lazily: after a
    /// crash a session may get again what it acknowledged since, never less).
    public var cursorFlushSeconds = 1.0
    /// Stop on SIGTERM, SIGINT and SIGHUP (the daemon); tests stop through `stopHandle`.
    public var handleSignals = true
    /// How long the loop polls for events before it sleeps, when traffic is dense
    /// (SpinPolicy.swift); 0 always sleeps.
    public var spinMicroseconds = SpinPolicy.defaultMicroseconds
    /// The wall clock, for the rules (questions' expiry, timestamps, retention). The
    /// connections' timers (handshake, heartbeat, pauses) run on the monotonic clock, so a
    /// wall clock set forward or back neither drops every connection nor keeps dead ones.
    public var wallClock: @Sendable () -> Timestamp = { Timestamp.now() }
    /// The data directory, whose file system's free space is checked at start and with
    /// every pruning (a warning while it is low); nil checks nothing.
    public var dataDirectory: String?
    /// How that free space is read (tests give their own).
    public var diskSpace: @Sendable (String) -> DiskSpace? = { DiskSpace.of($0) }

    /// A listening socket the service manager passed (socket activation): the relay serves
    /// it instead of binding `socketPath`, and leaves its file to the service manager.
    public var inheritedListener: Int32?

    public init(socketPath: String) { self.socketPath = socketPath }

    /// The longest socket path, in bytes: a Unix socket's address holds it and a terminating zero.
    public static let maxSocketPathBytes = 107
}

/// Stops a running server from another thread.
public struct StopHandle: Sendable {
    let fd: Int32
    public func stop() {
        var b: UInt8 = 15
        _ = Glibc.write(fd, &b, 1)
    }
}

/// Why the server could not start.
public struct ServerError: Error, CustomStringConvertible {
    public let description: String
    public init(_ d: String) { description = d }
}
