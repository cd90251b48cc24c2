// The relay's event loop: one thread, one epoll set, every connection and the core.
//
// One turn, in order:
//   1. wait for readiness, the next deadline, or the store's writer (Committer.swift);
//   2. accept, read every ready socket, feed whole frames to the core (a replaying
//      session's further frames wait until its replay has caught up);
//   3. run the core's timers, the handshake and heartbeat checks, and replay steps
//      (events read from the store, then this turn's, while no turn waits for a commit);
//   4. hand the turn's changes to the writer, and hold the turn's frames and closes
//      until they are committed: the turns handed over while a commit runs are
//      committed together in the next (group commit). A turn that changed nothing
//      while nothing waits sends at once;
//   5. for each turn committed, queue its frames and write them (EPOLLOUT only for
//      leftovers), and close the connections marked for closing;
//   6. a bounded step of pruning when one is due, through the writer too.

import CSystem
import Glibc
import RelayCore
import RelayHub
import RelayModel
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

public final class RelayServer {
    private let config: ServerConfig
    private let store: RelayStore
    private let log: Log
    /// The store as the core reads it.
    private let archive: LoggingArchive
    private var relay: RelayCore
    private let coreConfig: CoreConfig

    private var epfd: Int32 = -1
    private var listenFD: Int32 = -1
    /// A descriptor held in reserve. Out of descriptors, the loop lets it go just long enough
    /// to take a waiting connection and tell it `busy`: a connection left waiting keeps the
    /// listening socket ready, and the level-triggered loop would spin on it.
    private var spareFD: Int32 = -1
    /// The socket file this relay created (device and inode).
    private var socketFile: (dev_t, ino_t)?
    /// The socket file was found gone or another's (`checkSocketFile`).
    private var socketFileLost = false
    /// Accepting stopped until then, when even the spare could not take a connection.
    private var acceptPausedUntil: Int64?
    /// Refused connections kept open a moment after their `busy` (write side shut), read
    /// and discarded until the client closes: a client that sends its hello at once has it
    /// taken rather than failing on a closed socket, and reads the `busy` (a socket closed
    /// with unread input resets its peer's reads).
    private var lingering: [(fd: Int32, until: Int64)] = []
    static let lingerMillis: Int64 = 1000
    static let maxLingering = 64
    /// Connections refused since the last line logged about them, and why: one line a
    /// second at most, however many a flood brings.
    private var refusedSinceLog = 0
    private var refusalReason = ""
    private var lastRefusalLog: Int64 = .min / 2
    private let signalPipe: [Int32]
    private let committer: Committer
    /// Turns whose changes are with the writer, oldest first, and what each waits to send.
    private var uncommitted: [Batch] = []
    /// Messages from the hub taken this turn: told handled once its changes are committed.
    private var turnHubAcks: [HubMessage] = []
    /// Bytes of the replies this turn queued for each connection it fed (`Conn.unreleased`).
    private var turnOwed: [ConnectionID: Int] = [:]
    /// A pruning step is due / with the writer.
    private var pruneWanted = false
    private var pruneInFlight = false
    /// When the last pruning step went to the writer (monotonic milliseconds).
    private var lastPruneStep: Int64 = .min / 2
    private var conns: [ConnectionID: Conn] = [:]
    /// The connections a dispatch queued output for, each once, reused across turns.
    private var touched: [Conn] = []
    /// Connections whose requests wait until they are owed less (`Conn.inputPaused`).
    private var pausedInput: [Conn] = []
    private var nextID: ConnectionID = 1
    /// Unsent bytes per member, and in all (`Conn.counted`).
    private var memberBacklog: [String: Int] = [:]
    private var totalBacklog = 0
    private var stopping = false
    /// A commit failed and the store could not be read back: the core holds changes the
    /// store never took, so nothing it decides from then on is stored or sent.
    private var storeLost = false
    /// A commit failed once the relay was told to stop: `run` reports it.
    private var commitFailedWhileStopping = false
    // Times on the monotonic clock, in milliseconds (`Self.monotonicMillis`), as are the
    // connections' own.
    private var lastPrune: Int64
    /// A pruning pass under way: its cutoff, and the members whose acknowledged events
    /// may still go (`RelayStore.prune`).
    private var pruning: (cutoff: Timestamp, acknowledged: [String: Int64], settled: Int64)?
    /// The store's event positions at the last passes' starts (monotonic milliseconds):
    /// a pass takes the events appended before the latest one old enough (`prune(now:)`).
    private var positions: [(at: Int64, position: Int64)] = []
    /// The most changes the loop commits itself when the writer is idle (a light load's
    /// turn); larger batches go to the writer, and the loop reads on meanwhile.
    static let inlineCommitChanges = 64
    /// The most rows (each a commit's events of one member) one pruning step takes.
    static let pruneStepRows = 1000
    private var lastTimerScan: Int64 = .min / 2
    private var lastCursorFlush: Int64 = .min / 2
    /// The monotonic time of the current turn.
    private var turnMillis: Int64 = 0
    /// When the last warning of a low disk was logged, while it stays low.
    private var lowDiskWarned: Int64?
    /// After commits failed (a full disk, say): how many in a row, why the last did, and
    /// until when new connections are refused. Clients that reconnected at once would only
    /// fail again, and each failure closes every connection.
    private var failedCommits = 0
    private var commitFailure = ""
    private var refusingUntil: Int64 = .min
    private var scratch = [UInt8](repeating: 0, count: 65536)
    private var ready = [cs_ready](repeating: cs_ready(), count: RelayServer.readyPerTurn)
    private var spin: SpinPolicy

    /// The most ready connections one turn takes. A turn's replies and events all go out at
    /// its end, so a turn that took every connection ready after a slow one (hundreds under
    /// load) held all their replies until it had read and handled the lot. Those left over
    /// come first in the next turn: epoll moves the ones it returns to the back of its list.
    static let readyPerTurn = 32

    private static let listenToken: UInt64 = 0
    private static let signalToken: UInt64 = UInt64.max
    private static let committerToken: UInt64 = UInt64.max - 1
    private static let hubToken: UInt64 = UInt64.max - 2
    /// The link to the family hub, when the relay has one (`ServerConfig.hubURL`).
    private let bridge: HubBridge?

    /// A turn's changes, as the writer has them, and what waits for their commit.
    private struct Batch {
        /// The core's last take of changes in it (`RelayCore.takes`).
        var take: Int64
        /// Whether it changed anything (the hub's outbox, perhaps).
        var changed: Bool
        var outputs: [CoreOutput] = []
        /// Messages from the hub whose changes are in this batch (or an earlier one): the
        /// hub is told they are handled once it is committed.
        var hubAcks: [HubMessage] = []
        /// What admins changed (`RelayCore.takeNotes`), logged once it is committed.
        var notes: [String] = []
        /// Bytes of the replies in it for each connection (`Conn.unreleased`).
        var owed: [ConnectionID: Int] = [:]
    }

    /// A class, so that its buffers are changed in place: a struct copied out of `conns`
    /// shares them, and every append or drain then copied or reallocated a whole buffer.
    private final class Conn {
        let id: ConnectionID
        let fd: Int32
        var decoder: FrameDecoder
        var out: [UInt8] = []
        var outStart = 0
        var interest: UInt32 = 0
        let openedAt: Int64
        var lastHeard: Int64
        /// Since when the decoder has held part of a frame (nil when it holds none, or only
        /// whole frames a replay keeps waiting).
        var partSince: Int64?
        var pinged = false
        var closing: CloseReason?
        var closingSince: Int64?
        var peerGone = false
        /// Listed in `touched` during a dispatch.
        var touched = false
        /// The member whose session it is, once it holds unsent bytes.
        var owner: String?
        /// Its unsent bytes as counted in `memberBacklog` and `totalBacklog`.
        var counted = 0
        var pendingBytes: Int { out.count - outStart }
        /// Bytes of replies to its requests not queued in `out` yet (held for a commit).
        var unreleased = 0
        /// Bytes queued in `out`, and sent, since it opened.
        var queuedTotal = 0
        var sentTotal = 0
        /// Bytes of replies queued and not all sent: each batch's, until what was queued up
        /// to its end is sent (the events queued with them are not counted, only waited for).
        var repliesUnsent: [(end: Int, bytes: Int)] = []
        var repliesUnsentHead = 0
        var repliesUnsentBytes = 0
        /// Its requests wait (its socket read up to as much again) until it is owed less than
        /// `RelayServer.inputPauseBytes`.
        var inputPaused = false
        /// What it is owed for its own requests: replies not queued yet, and not sent yet.
        /// (Events from others do not hold its requests back: a guardian behind on questions
        /// still has its answers taken.)
        var owed: Int { unreleased + repliesUnsentBytes }

        /// Lets go of the replies now sent.
        func repliesSent() {
            while repliesUnsentHead < repliesUnsent.count && repliesUnsent[repliesUnsentHead].end <= sentTotal {
                repliesUnsentBytes -= repliesUnsent[repliesUnsentHead].bytes
                repliesUnsentHead += 1
            }
            if repliesUnsentHead == repliesUnsent.count {
                repliesUnsent.removeAll(keepingCapacity: true)
                repliesUnsentHead = 0
            } else if repliesUnsentHead > 64 && repliesUnsentHead > repliesUnsent.count / 2 {
                repliesUnsent.removeFirst(repliesUnsentHead)
                repliesUnsentHead = 0
            }
        }

        init(id: ConnectionID, fd: Int32, decoder: FrameDecoder, at now: Int64) {
            self.id = id
            self.fd = fd
            self.decoder = decoder
            openedAt = now
            lastHeard = now
        }
    }

    /// A server over `store`, with the core built from what it holds (again after a failed commit).
    public init(config: ServerConfig, coreConfig: CoreConfig, store: RelayStore, log: Log) throws {
        self.config = config
        self.spin = SpinPolicy(windowMicroseconds: config.spinMicroseconds)
        self.coreConfig = coreConfig
        self.store = store
        self.log = log
        self.archive = LoggingArchive(store, log: log, monotonicMillis: Self.monotonicMillis)
        self.relay = RelayCore(config: coreConfig, snapshot: try store.load(), archive: archive, now: config.wallClock())
        self.committer = try Committer(store: store)
        if let url = config.hubURL {
            guard let sqlite = store as? SQLiteStore else { throw ServerError("a family hub needs the SQLite store") }
            bridge = try HubBridge(
                url: url, credentials: config.hubCredentials, device: coreConfig.hubDevice ?? "", families: coreConfig.hubFamilies,
                retentionSeconds: coreConfig.retentionSeconds,
                outbox: try sqlite.hubOutboxReader(), log: log)
        } else {
            bridge = nil
        }
        self.lastPrune = Self.monotonicMillis()
        var fds: [Int32] = [-1, -1]
        guard cs_pipe(&fds) == 0 else { throw ServerError("cannot create a pipe: \(String(cString: strerror(errno)))") }
        signalPipe = fds
    }

    deinit {
        committer.stop()
        for fd in signalPipe where fd >= 0 { Glibc.close(fd) }
    }

    /// Ends `run` from any thread, like SIGTERM.
    public var stopHandle: StopHandle { StopHandle(fd: signalPipe[1]) }

    // MARK: - Start and stop

    /// Binds the socket (removing a stale one, refusing a live one) and serves until SIGTERM
    /// or SIGINT. Throws once stopped when the store failed at the end: the store could not
    /// be read back after a failed commit, or the last changes could not be committed at the
    /// stop (nothing of those was sent): a service manager must see a failure.
    public func run(onReady: () -> Void = {}) throws {
        try bind()
        defer { teardown() }
        turnMillis = Self.monotonicMillis()
        checkDiskSpace()
        onReady()
        while !stopping {
            try turn()
        }
        let notCommitted = shutdown()
        if storeLost {
            throw ServerError("stopped because the store could not be read back after a failed commit; run `permission-relay check`")
        }
        if commitFailedWhileStopping || notCommitted > 0 {
            throw ServerError(
                "stopped with the last changes not committed (\(commitFailure.isEmpty ? "the writer stopped" : commitFailure)); nothing of them was sent,"
                    + " and clients send them again")
        }
    }

    private func bind() throws {
        if let inherited = config.inheritedListener {
            listenFD = inherited
        } else {
            try bindSocketPath()
        }
        epfd = cs_epoll_create()
        guard epfd >= 0 else { throw ServerError("cannot create the event loop") }
        if config.handleSignals { cs_route_signals(signalPipe[1]) }
        cs_epoll_ctl(epfd, 0, listenFD, cs_epollin, Self.listenToken)
        cs_epoll_ctl(epfd, 0, signalPipe[0], cs_epollin, Self.signalToken)
        cs_epoll_ctl(epfd, 0, committer.wakeup.readFD, cs_epollin, Self.committerToken)
        if let bridge {
            cs_epoll_ctl(epfd, 0, bridge.wakeup.readFD, cs_epollin, Self.hubToken)
            bridge.start()
        }
        spareFD = Self.openSpare()
    }

    /// Whether something listens on the socket `path`, also one too busy to accept (errno
    /// says why not).
    public static func isServed(_ path: String) -> Bool { cs_unix_listener_present(path) == 1 }

    /// What a relay says when another one already serves its socket `path`.
    public static func servedAlready(_ path: String) -> String {
        "another relay is already serving \(path); stop it first or choose another --socket"
    }

    private func bindSocketPath() throws {
        let path = config.socketPath
        var st = stat()
        if lstat(path, &st) == 0 {
            // Only a socket is ever removed: a mistyped --socket must not cost someone a file.
            guard st.st_mode & S_IFMT == S_IFSOCK else {
                throw ServerError("\(path) exists and is not a socket; choose another --socket, or remove it if it is not needed")
            }
            if Self.isServed(path) { throw ServerError(Self.servedAlready(path)) }
            guard errno == ECONNREFUSED || errno == ENOTSOCK else {
                throw ServerError("\(path) exists and cannot be checked: \(String(cString: strerror(errno)))")
            }
            log(.info, "removing stale socket \(path) left by a relay that did not stop cleanly")
            unlink(path)
        }
        // Made private, then opened as far as configured: the umask is the whole process's,
        // and one wider than the relay's own would reach the files its threads make meanwhile.
        let oldMask = umask(0o077)
        listenFD = cs_listen_unix(path, 1024)
        umask(oldMask)
        if listenFD == -2 { throw ServerError("socket path is empty or too long (at most 107 bytes): \(path)") }
        guard listenFD >= 0 else { throw ServerError("cannot listen on \(path): \(String(cString: strerror(errno)))") }
        guard chmod(path, config.socketMode) == 0 else {
            throw ServerError("cannot set the mode of \(path): \(String(cString: strerror(errno)))")
        }
        socketFile = Self.fileID(path)
    }

    private static func openSpare() -> Int32 { open("/dev/null", O_RDONLY | O_CLOEXEC) }

    /// The device and inode of the file at `path`, not following a symbolic link.
    private static func fileID(_ path: String) -> (dev_t, ino_t)? {
        var st = stat()
        return lstat(path, &st) == 0 ? (st.st_dev, st.st_ino) : nil
    }

    /// Says once (again after it came back) that the socket file is gone or another's: a
    /// relay no client can reach would otherwise go on unnoticed.
    private func checkSocketFile() {
        guard let mine = socketFile else { return }  // a service manager's socket is its own
        let ours = Self.fileID(config.socketPath).map { $0 == mine } ?? false
        if !ours && !socketFileLost {
            log(
                .error,
                "the socket \(config.socketPath) was removed or replaced: no new client can reach this relay (its connections"
                    + " go on); stop it and start it again to listen there")
        }
        socketFileLost = !ours
    }

    /// Removes the socket file if it is still this relay's: one removed meanwhile (say, by a
    /// cleaner of /tmp) may have been replaced by another relay's, which must stay.
    private func removeSocketFile() {
        guard let mine = socketFile, let now = Self.fileID(config.socketPath), now == mine else { return }
        unlink(config.socketPath)
    }

    private func teardown() {
        for id in Array(conns.keys) { closeNow(id) }
        for refused in lingering { Glibc.close(refused.fd) }
        lingering.removeAll()
        if listenFD >= 0 {
            Glibc.close(listenFD)
            removeSocketFile()
        }
        if epfd >= 0 { Glibc.close(epfd) }
        if spareFD >= 0 { Glibc.close(spareFD) }
        listenFD = -1
        epfd = -1
        spareFD = -1
    }

    /// Stop accepting, answer the frames in hand, commit, say goodbye, close (§9).
    /// Returns how many turns were left that the writer will never commit.
    private func shutdown() -> Int {
        log(.info, "shutting down")
        Glibc.close(listenFD)
        removeSocketFile()
        listenFD = -1
        // Requests that waited for their connection to read are taken as far as their replies
        // fit (§9: the frames in hand); clients send again what is left.
        if !pausedInput.isEmpty { resumeInput(now: config.wallClock()) }
        for id in Array(conns.keys) { relay.drop(id, .shutdown) }
        relay.flushCursors()
        finishTurn()
        var notCommitted = 0
        while !uncommitted.isEmpty {
            committer.waitUntilIdle()
            collectOutcomes()
            if !uncommitted.isEmpty && committer.isIdle {
                // Turns the writer will never commit: nothing of them was sent.
                notCommitted = uncommitted.count
                log(.error, "stopping with \(notCommitted) turns not committed; nothing of them was sent")
                break
            }
        }
        drainBeforeClosing(milliseconds: 1000)
        for id in Array(conns.keys) { closeNow(id) }
        bridge?.stop()
        committer.stop()
        return notCommitted
    }

    /// Gives what the sockets have not taken yet up to `milliseconds` to go out: the replies
    /// in hand and the goodbyes reach clients that keep reading (those that do not would
    /// get them replayed anyway, or resend).
    private func drainBeforeClosing(milliseconds: Int64) {
        let until = Self.monotonicMillis() + milliseconds
        while Self.monotonicMillis() < until {
            let waiting = conns.values.filter { $0.pendingBytes > 0 && !$0.peerGone }
            guard !waiting.isEmpty else { return }
            for c in waiting {
                flush(c)
                if conns[c.id] != nil { setInterest(c) }
            }
            let wait = Int32(max(1, min(50, until - Self.monotonicMillis())))
            _ = cs_epoll_wait(epfd, &ready, Int32(ready.count), wait)
        }
    }

    // MARK: - One turn

    private func turn() throws {
        let now = config.wallClock()
        let idleTimeout = 1000
        var timeout = idleTimeout
        if let d = relay.nextDeadline { timeout = max(0, min(timeout, Int(d.milliseconds - now.milliseconds) + 1)) }
        if let until = acceptPausedUntil { timeout = max(0, min(timeout, Int(until - Self.monotonicMillis()) + 1)) }
        if uncommitted.isEmpty && relay.replaying.contains(where: { (conns[$0]?.pendingBytes ?? 0) < replayLowWater }) {
            timeout = 0
        }
        if pausedInput.contains(where: { $0.owed < inputPauseBytes }) { timeout = 0 }

        let n = spin.wait(timeoutMs: Int32(timeout)) { cs_epoll_wait(epfd, &ready, Int32(ready.count), $0) }
        guard n >= 0 else { throw ServerError("epoll_wait failed: \(String(cString: strerror(errno)))") }
        let t = config.wallClock()
        turnMillis = Self.monotonicMillis()

        for k in 0..<Int(n) {
            let r = ready[k]
            switch r.token {
            case Self.listenToken: acceptAll()
            case Self.signalToken: drainSignals()
            case Self.committerToken: collectOutcomes()
            case Self.hubToken: takeFromHub(now: t)
            default:
                let id = ConnectionID(r.token)
                if r.events & (cs_epollin | cs_epollhup | cs_epollerr | cs_epollrdhup) != 0 { read(id, now: t) }
                if r.events & cs_epollout != 0, let c = conns[id] { flush(c) }
            }
        }

        if !pausedInput.isEmpty { resumeInput(now: t) }
        relay.tick(now: t)
        checkTimers()
        closeLingering()
        if let until = acceptPausedUntil, turnMillis >= until {
            acceptPausedUntil = nil
            cs_epoll_ctl(epfd, 1, listenFD, cs_epollin, Self.listenToken)
        }
        replaySteps(now: t)
        prune(now: t)
        if Double(turnMillis - lastCursorFlush) >= config.cursorFlushSeconds * 1000 {
            // Cursors are stored lazily (§6): after a crash a session may get again what it
            // acknowledged since, never less.
            relay.flushCursors()
            lastCursorFlush = turnMillis
        }
        finishTurn()
        if pruneWanted { submitPruneStep() }  // also in a turn that changed nothing
        flushTouched()  // what the server queued itself (pings) while the turn's replies wait
    }

    /// Hands the turn's changes to the writer, holding its frames until they are committed;
    /// sends them now when it changed nothing and nothing waits to be committed. The writer
    /// takes every turn handed over while it committed the last into its next transaction
    /// (group commit), without waiting for the loop to collect the last one's outcome.
    private func finishTurn() {
        let changes = relay.takeChanges()
        let notes = relay.takeNotes()
        let owed = turnOwed
        turnOwed.removeAll(keepingCapacity: true)
        guard !storeLost else {
            relay.drainOutputs { _ in }
            turnHubAcks.removeAll()
            return
        }
        var batch = Batch(take: relay.takes, changed: !changes.isEmpty, hubAcks: turnHubAcks, notes: notes, owed: owed)
        turnHubAcks.removeAll()
        relay.drainOutputs { batch.outputs.append($0) }
        if changes.isEmpty {
            guard let last = uncommitted.indices.last else { return release(batch) }
            // Behind the frames waiting for a commit, as they were queued.
            uncommitted[last].outputs += batch.outputs
            uncommitted[last].hubAcks += batch.hubAcks
            uncommitted[last].notes += batch.notes
            uncommitted[last].owed.merge(batch.owed, uniquingKeysWith: +)
            uncommitted[last].take = batch.take
        } else if changes.count <= Self.inlineCommitChanges && uncommitted.isEmpty && !pruneInFlight && committer.isIdle {
            // The writer is idle and the batch small: committed here, its replies go now,
            // without two threads waking each other for a commit of a few rows.
            do {
                try store.commit(changes)
                failedCommits = 0
                release(batch)
                store.finishCommits()
            } catch {
                commitFailed(error)
            }
        } else {
            uncommitted.append(batch)
            committer.submit(.commit(changes))
        }
    }

    /// Hands a pruning step to the writer when one is due: under load, one every 10 ms at
    /// most, as it takes the writer from commits (the store checks the cursors it has, so a
    /// step may go before a commit of newer ones).
    private func submitPruneStep() {
        guard pruneWanted && !pruneInFlight, let pass = pruning, uncommitted.isEmpty || turnMillis - lastPruneStep >= 10 else {
            return
        }
        pruneWanted = false
        pruneInFlight = true
        lastPruneStep = turnMillis
        committer.submit(
            .prune(
                olderThan: pass.cutoff, acknowledged: pass.acknowledged, settledThrough: pass.settled,
                questionsKept: config.questionsKept, limit: Self.pruneStepRows))
    }

    /// A committed turn: its frames are sent, the hub told its messages are handled, and
    /// the bridge woken for what it may have added to the outbox.
    private func release(_ batch: Batch) {
        relay.committed(throughTake: batch.take)
        for n in batch.notes { log(.info, n) }
        dispatch(batch.outputs, owed: batch.owed)
        guard let bridge else { return }
        bridge.acknowledge(batch.hubAcks)
        if batch.changed { bridge.noteOutboxChanged() }
    }

    /// What the bridge brought from the hub: outbox messages it stored, and messages of
    /// the families' streams, each acknowledged to the hub once what it changed is committed.
    private func takeFromHub(now: Timestamp) {
        guard let bridge else { return }
        let items = bridge.take()
        // Woken also when the link goes down or comes back, or the hub refuses this device.
        let (connected, refused) = (bridge.isConnected, bridge.isRefused)
        // (The bridge says when it links the first time.)
        if connected != relay.hubLink.connected && relay.hubLink.lastContact != nil {
            log(
                connected ? .info : .warning,
                connected
                    ? "the family hub is reachable again" : "the family hub is out of reach; what this device must send waits here")
        }
        relay.hubLink.connected = connected
        relay.hubLink.inbox = connected ? bridge.inbox : nil  // unknown while out of reach
        relay.hubRefused = refused
        if !items.isEmpty || connected { relay.hubLink.lastContact = now }
        for item in items {
            switch item {
            case .sent(let id):
                relay.hubSent(id)
            case .message(let m):
                switch relay.hubMessage(subject: m.subject, body: m.body, deliveries: m.deliveries, now: now) {
                case .held: continue  // not acknowledged: kept for its asking
                case .ignored(let why): log(.info, "from the family hub: \(why)")
                case .applied, .known: break
                }
                turnHubAcks.append(m)
            }
        }
    }

    /// What the writer has done since the last call: turns committed are sent.
    private func collectOutcomes() {
        for outcome in committer.takeOutcomes() {
            switch outcome {
            case .committed(let turns):
                failedCommits = 0
                assert(turns <= uncommitted.count, "an outcome for turns never handed over")
                let done = uncommitted.prefix(turns)
                uncommitted.removeFirst(done.count)
                for batch in done { release(batch) }
            case .commitFailed(let error):
                commitFailed(error)
            case .pruned(let step):
                pruneInFlight = false
                // Told to the core also when the pass was given up meanwhile (a failed commit).
                for (member, seq) in step.through {
                    relay.eventsDropped(member: member, through: seq)
                    if seq >= pruning?.acknowledged[member] ?? .max { pruning?.acknowledged[member] = nil }
                }
                guard pruning != nil else { continue }
                if step.more { pruneWanted = true } else { pruning = nil }
            case .pruneFailed(let error, let done):
                pruneInFlight = false
                pruning = nil
                for (member, seq) in done?.through ?? [:] { relay.eventsDropped(member: member, through: seq) }
                log(
                    .warning,
                    "could not prune old events or forget old questions (tried again in \(Int(config.pruneIntervalSeconds)) s): \(error)")
            }
        }
        submitPruneStep()
    }

    /// The next step of each replay whose connection has room: its events from the store.
    /// None while a turn is with the writer: the frames of a step held for a commit do not
    /// count in the connection's unsent bytes, and steps taken meanwhile would pile up.
    private func replaySteps(now: Timestamp) {
        guard !relay.replaying.isEmpty, uncommitted.isEmpty else { return }
        for id in relay.replaying {
            guard let c = conns[id], c.pendingBytes < replayLowWater, let (member, after) = relay.replayPosition(id) else {
                continue
            }
            let (limit, budget) = (coreConfig.replayBatch, coreConfig.replayBudgetBytes)
            do {
                let stored = try store.events(member: member, after: after, limit: limit, maxBytes: budget)
                // Cut short by its size, the step is not the store's last (as a full one is not).
                let cut = stored.reduce(0) { $0 + $1.frame.count } >= budget
                if let why = relay.continueReplay(id, stored: stored, limit: cut ? stored.count : limit) {
                    log(.error, "connection \(id): \(why)")
                }
            } catch {
                log(.error, "connection \(id): could not read \(member)'s stored events for its replay: \(error)")
                relay.replayFailed(id, "\(error)")
            }
            process(c, now: now)
        }
    }

    /// A replaying connection gets its next step once its unsent bytes fall below this.
    private var replayLowWater: Int { min(65536, config.maxOutputBytes / 4) }

    /// A commit failed (a full disk, say): nothing of its turns, nor of those handed over
    /// behind them, is sent. Every connection is told and closed (clients resend
    /// what was not acknowledged), new ones are refused for a while, and the core is
    /// rebuilt from what the store holds.
    private func commitFailed(_ error: any Error) {
        failedCommits += 1
        if stopping { commitFailedWhileStopping = true }
        let pause = Self.refusalAfterFailedCommits(failedCommits)
        refusingUntil = Self.monotonicMillis() + pause
        commitFailure = (error as? SQLiteError)?.isFull == true ? "out of disk space" : "\(error)"
        log(
            .error,
            "could not commit to the store: \(error); nothing of it was sent, closing every connection so "
                + "clients resend, and refusing new ones for \(pause / 1000) s")
        uncommitted.removeAll()
        turnHubAcks.removeAll()
        (pruning, pruneWanted) = (nil, false)
        relay.drainOutputs { _ in }
        _ = relay.takeChanges()
        _ = relay.takeNotes()
        turnOwed.removeAll()
        for c in touched { c.touched = false }
        touched.removeAll(keepingCapacity: true)
        let notice = RequestError(
            .busy, "the relay could not store changes (\(commitFailure)); nothing since its last reply was kept, send it again later"
        ).frame(re: nil).frame
        for (id, c) in conns {
            // After the frames still waiting to go (one may be half sent), as far as the socket takes them.
            c.out.append(bytes: notice)
            _ = c.out.withUnsafeBytes { cs_send(c.fd, $0.baseAddress! + c.outStart, c.pendingBytes) }
            closeNow(id)
        }
        do {
            let rebuilt = RelayCore(config: coreConfig, snapshot: try store.load(), archive: archive, now: config.wallClock())
            rebuilt.carryOver(from: relay)
            relay = rebuilt
            committer.resume()
        } catch {
            log(.error, "could not reload the store: \(error); stopping")
            stopping = true
            storeLost = true
        }
    }

    /// How long new connections are refused after the `n`th failed commit in a row, in
    /// milliseconds: one second, doubling up to 4, so that a relay whose disk was full
    /// takes changes again within seconds of space being freed.
    static func refusalAfterFailedCommits(_ n: Int) -> Int64 { 1000 << Int64(min(max(n, 1) - 1, 2)) }

    private func acceptAll() {
        while true {
            let fd = cs_accept(listenFD)
            guard fd >= 0 else {
                if errno == EMFILE || errno == ENFILE, refuseWithSpare() { continue }
                return
            }
            if conns.count >= config.maxConnections {
                refuse(fd, "at its connection limit (\(config.maxConnections))")
                continue
            }
            if turnMillis < refusingUntil {
                refuse(fd, "unable to store changes (\(commitFailure)) for another \((refusingUntil - turnMillis + 999) / 1000) s")
                continue
            }
            let id = nextID
            nextID += 1
            let uid = cs_peer_uid(fd)
            let c = Conn(id: id, fd: fd, decoder: FrameDecoder(maxFrameBytes: coreConfig.maxFrameBytes), at: turnMillis)
            conns[id] = c
            relay.connected(id, peerUID: uid >= 0 ? UInt32(uid) : nil)
            log(.debug, "connection \(id) opened (uid \(uid >= 0 ? String(uid) : "unknown"))")
            setInterest(c)
        }
    }

    /// Tells a connection `busy`, closes it (once its client has, or in a moment: see
    /// `lingering`; at once when out of descriptors), and notes it for the log.
    private func refuse(_ fd: Int32, _ why: String, linger: Bool = true) {
        let frame = RequestError(.busy, "the relay is \(why); try again later").frame(re: nil).frame
        _ = frame.withUnsafeBytes { cs_send(fd, $0.baseAddress, $0.count) }
        if linger && lingering.count < Self.maxLingering && Glibc.shutdown(fd, Int32(SHUT_WR)) == 0 {
            lingering.append((fd, turnMillis + Self.lingerMillis))
        } else {
            Glibc.close(fd)
        }
        refusedSinceLog += 1
        refusalReason = why
        logRefusals()
    }

    /// Closes the refused connections whose clients have closed theirs, or whose moment is over.
    private func closeLingering() {
        guard !lingering.isEmpty else { return }
        lingering.removeAll { refused in
            var n = 0
            repeat {
                n = scratch.withUnsafeMutableBytes { Glibc.read(refused.fd, $0.baseAddress, $0.count) }
            } while n > 0
            let over = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || turnMillis >= refused.until
            if over { Glibc.close(refused.fd) }
            return over
        }
    }

    /// Logs the connections refused since the last such line, once a second at most.
    private func logRefusals() {
        guard refusedSinceLog > 0, turnMillis - lastRefusalLog >= 1000 else { return }
        let what = refusedSinceLog == 1 ? "a connection" : "\(refusedSinceLog) connections"
        log(.warning, "refused \(what): the relay is \(refusalReason)")
        refusedSinceLog = 0
        lastRefusalLog = turnMillis
    }

    /// Out of descriptors: lets the spare go to take the next waiting connection, refuses it,
    /// and takes the spare back; true when it took one. When even that fails with connections
    /// still waiting, accepting pauses.
    private func refuseWithSpare() -> Bool {
        var fd: Int32 = -1
        var nothingWaiting = false
        if spareFD >= 0 {
            Glibc.close(spareFD)
            fd = cs_accept(listenFD)
            nothingWaiting = fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)
            if fd >= 0 { refuse(fd, "out of file descriptors", linger: false) }
            spareFD = Self.openSpare()
        }
        if fd < 0 && !nothingWaiting { pauseAccepting() }
        return fd >= 0
    }

    /// Stops watching the listening socket for a tenth of a second, when even the spare
    /// could not take a waiting connection (the whole system is out of descriptors).
    private func pauseAccepting() {
        guard acceptPausedUntil == nil else { return }
        acceptPausedUntil = turnMillis + 100
        cs_epoll_ctl(epfd, 1, listenFD, 0, Self.listenToken)
        guard turnMillis - lastRefusalLog >= 1000 else { return }
        log(.warning, "out of file descriptors, even the one kept in reserve: not accepting connections for a while")
        lastRefusalLog = turnMillis
    }

    private static func monotonicMillis() -> Int64 { Int64(monotonicNanos() / 1_000_000) }

    private func drainSignals() {
        var b = [UInt8](repeating: 0, count: 16)
        while Glibc.read(signalPipe[0], &b, 16) > 0 {}
        stopping = true
    }

    private func read(_ id: ConnectionID, now: Timestamp) {
        guard let c = conns[id], c.closing == nil else { return }
        var budget = 1 << 20
        while budget > 0 {
            let n = scratch.withUnsafeMutableBytes { Glibc.read(c.fd, $0.baseAddress, $0.count) }
            if n > 0 {
                scratch.withUnsafeBytes { c.decoder.append(UnsafeRawBufferPointer(rebasing: $0[0..<n])) }
                c.lastHeard = turnMillis
                c.pinged = false
                budget -= n
                if holdsEnoughInput(c) { break }
                // A short read has most likely drained the socket: the read that would say
                // so is saved (readiness is level-triggered, so anything left is reported again).
                if n < scratch.count { break }
                continue
            }
            if n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) { c.peerGone = true }
            break
        }
        process(c, now: now)
        if c.peerGone {
            relay.disconnected(id)
            closeNow(id)
        } else {
            setInterest(c)
        }
    }

    /// Feeds whole frames to the core, stopping while the session replays, and while the
    /// connection is owed `inputPauseBytes` or more (`resumeInput` goes on). The connection
    /// stays in `conns` meanwhile: the core's closes take effect at the dispatch.
    private func process(_ c: Conn, now: Timestamp) {
        let id = c.id
        var whole = false
        relay.countedConnection = id
        defer {
            c.unreleased += relay.countedBytes
            turnOwed[id, default: 0] += relay.countedBytes
            relay.countedConnection = nil
        }
        while relay.takesFrames(id) {
            guard c.owed + relay.countedBytes < inputPauseBytes else {
                // Whole frames wait (a part after them is checked once they are taken).
                if !c.inputPaused {
                    c.inputPaused = true
                    pausedInput.append(c)
                }
                c.partSince = nil
                return
            }
            switch c.decoder.withNextFrame({ relay.receive(id, body: $0, now: now) }) {
            case .frame: whole = true
            case .violation(let code, let message): relay.framingViolation(id, code, message)
            case .incomplete:
                // After a whole frame the part held is the next frame's, begun in this read.
                c.partSince = c.decoder.bufferedCount == 0 ? nil : whole ? turnMillis : c.partSince ?? turnMillis
                return
            }
        }
        c.partSince = nil
    }

    private func checkTimers() {
        let now = turnMillis
        // Connection timers need no finer grain than a quarter second; skip the scan in between.
        guard now - lastTimerScan >= 250 else { return }
        lastTimerScan = now
        logRefusals()
        checkSocketFile()
        let hb = Int64(coreConfig.heartbeatSeconds) * 1000
        let handshake = Int64(config.handshakeTimeoutSeconds * 1000)
        for (id, c) in conns {
            if let since = c.closingSince {
                // A peer that does not read its last frames is not waited for long.
                if now - since >= 2000 {
                    relay.disconnected(id)
                    closeNow(id)
                }
                continue
            }
            let silent = now - c.lastHeard
            if !relay.isEstablished(id) {
                if now - c.openedAt >= handshake { relay.drop(id, .handshakeTimeout) }
            } else if silent >= 3 * hb {
                relay.drop(id, .heartbeatTimeout)
            } else if let since = c.partSince, now - since >= 3 * hb {
                // Bytes that trickle in keep a connection from being silent; a frame that
                // never ends would still hold its buffer (up to the largest frame) for good.
                relay.framingViolation(id, .badFrame, "a frame stayed incomplete for \(3 * hb / 1000) s; closing")
            } else if silent >= hb && !c.pinged {
                c.pinged = true
                enqueue(Self.pingFrame, to: c)
            }
        }
    }

    // MARK: - Output

    /// Queues and writes frames held for a commit; `owed`: the bytes of each connection's
    /// replies among them (`Batch.owed`), still owed until everything queued with them is sent.
    private func dispatch(_ outputs: [CoreOutput], owed: [ConnectionID: Int] = [:]) {
        // A reply and the events it caused often go to one connection: looked up once.
        var lastID: ConnectionID = -1
        var last: Conn?
        for o in outputs {
            switch o {
            case .send(let id, let frame):
                if id != lastID { (lastID, last) = (id, conns[id]) }
                guard let c = last else { continue }
                enqueue(frame, to: c)
            case .close(let id, let reason):
                if id != lastID { (lastID, last) = (id, conns[id]) }
                guard let c = last else { continue }
                c.closing = reason
                c.closingSince = Self.monotonicMillis()
                touch(c)
            }
        }
        for (id, bytes) in owed where bytes > 0 {
            guard let c = conns[id] else { continue }
            c.unreleased -= bytes
            c.repliesUnsent.append((end: c.queuedTotal, bytes: bytes))
            c.repliesUnsentBytes += bytes
        }
        flushTouched()
    }

    /// Writes what was queued for each connection touched since the last call.
    private func flushTouched() {
        // Last touched first: a request's reply is written before the events it causes, and
        // the others waiting for those (a guardian for a question, a child for its answer)
        // should not wait behind the requester's `ok`.
        for c in touched.reversed() {
            c.touched = false
            flush(c)
        }
        touched.removeAll(keepingCapacity: true)
    }

    private static let pingFrame = (["type": "ping"] as JSONObject).frame

    /// Queues bytes for a connection: the one way output is queued, so nothing queued
    /// waits unwritten (it is written at the end of this turn's dispatch).
    private func enqueue(_ bytes: [UInt8], to c: Conn) {
        c.out.append(bytes: bytes)
        c.queuedTotal += bytes.count
        touch(c)
    }

    /// A connection owed this many bytes takes no more requests until it is owed less: a
    /// client that pipelines requests with large replies (lists) gets them one after
    /// another, as it reads, rather than all at once past its output limit. As much as
    /// leaves room under that limit for one more reply, the largest a list makes (3 MiB by
    /// default), so that a client that writes its requests before it reads their replies
    /// gets as far as it can.
    private var inputPauseBytes: Int {
        max(replayLowWater, config.maxOutputBytes - coreConfig.listReplyBytes - coreConfig.maxFrameBytes)
    }

    /// While its requests wait (a replay, or `inputPaused`), a connection is read until it
    /// holds a frame's worth (`inputPauseBytes` when paused, if more): what it sends is seen
    /// (it is not silent), and what it holds is bounded.
    private func holdsEnoughInput(_ c: Conn) -> Bool {
        if c.inputPaused { return c.decoder.bufferedCount > max(coreConfig.maxFrameBytes, inputPauseBytes) }
        return c.decoder.bufferedCount > coreConfig.maxFrameBytes && relay.isReplaying(c.id)
    }

    /// Takes up again the requests of connections now owed less than `inputPauseBytes`.
    private func resumeInput(now: Timestamp) {
        let waiting = pausedInput
        pausedInput.removeAll()
        for c in waiting where conns[c.id] === c {
            guard c.owed < inputPauseBytes else {
                pausedInput.append(c)
                continue
            }
            c.inputPaused = false
            process(c, now: now)
            setInterest(c)
        }
    }

    /// Marks a connection to be flushed at the end of the dispatch, once.
    private func touch(_ c: Conn) {
        guard !c.touched else { return }
        c.touched = true
        touched.append(c)
    }

    private func flush(_ c: Conn) {
        let id = c.id
        while c.pendingBytes > 0 {
            let n = c.out.withUnsafeBytes { cs_send(c.fd, $0.baseAddress! + c.outStart, c.pendingBytes) }
            if n > 0 {
                c.outStart += n
                c.sentTotal += n
                // A client that reads is alive: while its requests wait it cannot be heard
                // (its pings wait behind them), and is not taken for silent.
                if c.inputPaused { c.lastHeard = turnMillis }
                continue
            }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { break }
            c.peerGone = true
            break
        }
        c.repliesSent()
        if c.outStart == c.out.count {
            c.out.removeAll(keepingCapacity: c.out.capacity <= 65536)
            c.outStart = 0
        } else if c.outStart > 65536 && c.outStart > c.out.count / 2 {
            c.out.removeFirst(c.outStart)
            c.outStart = 0
        }
        count(c)
        if c.peerGone || (c.closing != nil && c.pendingBytes == 0) {
            relay.disconnected(id)
            closeNow(id)
        } else if let why = tooMuchUnsent(c) {
            log(.warning, "connection \(id) holds \(c.pendingBytes) unsent bytes\(why); dropping it as a slow consumer")
            relay.disconnected(id)
            closeNow(id)
        } else {
            setInterest(c)
        }
    }

    /// Counts the connection's unsent bytes for its member and in all.
    private func count(_ c: Conn) {
        let delta = c.pendingBytes - c.counted
        guard delta != 0 else { return }
        if c.owner == nil { c.owner = relay.member(of: c.id) ?? "" }
        c.counted = c.pendingBytes
        totalBacklog += delta
        if let owner = c.owner, !owner.isEmpty {
            let now = memberBacklog[owner, default: 0] + delta
            memberBacklog[owner] = now == 0 ? nil : now
        }
    }

    /// Why a connection that still holds unsent bytes holds too many, if it does.
    private func tooMuchUnsent(_ c: Conn) -> String? {
        guard c.pendingBytes > 0 else { return nil }
        if c.pendingBytes > config.maxOutputBytes { return "" }
        if let owner = c.owner, let held = memberBacklog[owner], held > config.maxMemberOutputBytes {
            return ", and \(owner)'s connections \(held) together"
        }
        if totalBacklog > config.maxTotalOutputBytes { return ", and all connections \(totalBacklog) together" }
        return nil
    }

    private func setInterest(_ c: Conn) {
        var want = cs_epollrdhup
        let holdReads = holdsEnoughInput(c)
        if c.closing == nil && !holdReads { want |= cs_epollin }
        if c.pendingBytes > 0 { want |= cs_epollout }
        guard want != c.interest else { return }
        cs_epoll_ctl(epfd, c.interest == 0 ? 0 : 1, c.fd, want, UInt64(c.id))
        c.interest = want
    }

    private func closeNow(_ id: ConnectionID) {
        guard let c = conns.removeValue(forKey: id) else { return }
        log(.debug, "connection \(id) closed (\(c.closing?.rawValue ?? (c.peerGone ? "by the client" : "by the relay")))")
        c.out = []
        c.outStart = 0
        count(c)
        cs_epoll_ctl(epfd, 2, c.fd, 0, 0)
        Glibc.close(c.fd)
    }

    /// Every `pruneIntervalSeconds` a pass starts: events past the retention window, and
    /// those every durable session of their member has acknowledged (with the cursors
    /// that say so committed first), go a bounded step at a time, through the writer,
    /// until none is left.
    private func prune(now: Timestamp) {
        guard pruning == nil, Double(turnMillis - lastPrune) >= config.pruneIntervalSeconds * 1000 else { return }
        lastPrune = turnMillis
        checkDiskSpace()
        relay.flushCursors()
        lastCursorFlush = turnMillis
        // Events appended within two cursor flushes may yet be acknowledged in the store: a
        // later pass takes them, rather than this one keeping them (indexing them, in SQLite).
        // Told by position, and timed on the monotonic clock: a wall clock set back or
        // forward neither holds every event back nor lets young ones through.
        let settling = Int64(config.cursorFlushSeconds * 2000) + 500
        positions.append((turnMillis, store.eventPosition))
        let settledIndex = positions.lastIndex { turnMillis - $0.at >= settling }
        let settled = settledIndex.map { positions[$0].position } ?? 0
        if let settledIndex { positions.removeFirst(settledIndex) }
        pruning = (
            Timestamp(milliseconds: now.milliseconds - coreConfig.retentionSeconds * 1000), relay.acknowledgedByAllSessions(), settled
        )
        pruneWanted = true
    }

    /// Warns while the data directory's file system is low on space (every ten minutes),
    /// and says when it has room again.
    private func checkDiskSpace() {
        guard let dir = config.dataDirectory, let space = config.diskSpace(dir) else { return }
        if space.isLow {
            if let last = lowDiskWarned, turnMillis - last < 600_000 { return }
            lowDiskWarned = turnMillis
            log(
                .warning,
                "the data directory's file system has \(DiskSpace.shown(space.available)) free of \(DiskSpace.shown(space.total));"
                    + " once it is full the relay cannot take changes (each one fails, and clients reconnect and resend):"
                    + " free some space, or move --data")
        } else if lowDiskWarned != nil {
            lowDiskWarned = nil
            log(.info, "the data directory's file system has room again (\(DiskSpace.shown(space.available)) free)")
        }
    }
}
