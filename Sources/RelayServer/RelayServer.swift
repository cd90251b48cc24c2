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
//
// Layout: this file holds the loop's state, its start and stop, and the turn;
// RelayServer+Listening.swift accepting (and refusing) connections and the socket file;
// RelayServer+Connections.swift reading, replay steps, timers and the one way output is
// written; RelayServer+Commits.swift the turns through the writer (Committer.swift) and
// pruning; ServerConnection.swift a connection's own state.

import CSystem
import Glibc
import RelayCore
import RelayHub
import RelayModel
import RelayProtocol
import RelayStore

public final class RelayServer {
    let config: ServerConfig
    let store: RelayStore
    let log: Log
    /// The store as the core reads it.
    let archive: LoggingArchive
    var relay: RelayCore
    let coreConfig: CoreConfig

    var epfd: Int32 = -1
    var listenFD: Int32 = -1
    /// A descriptor held in reserve. Out of descriptors, the loop lets it go just long enough
    /// to take a waiting connection and tell it `busy`: a connection left waiting keeps the
    /// listening socket ready, and the level-triggered loop would spin on it.
    var spareFD: Int32 = -1
    /// The socket file this relay created (device and inode).
    var socketFile: (dev_t, ino_t)?
    /// The socket file was found gone or another's (`checkSocketFile`).
    var socketFileLost = false
    /// Accepting stopped until then, when even the spare could not take a connection.
    var acceptPausedUntil: Int64?
    /// Refused connections kept open a moment after their `busy` (write side shut), read
    /// and discarded until the client closes: a client that sends its hello at once has it
    /// taken rather than failing on a closed socket, and reads the `busy` (a socket closed
    /// with unread input resets its peer's reads).
    var lingering: [(fd: Int32, until: Int64)] = []
    static let lingerMillis: Int64 = 1000
    static let maxLingering = 64
    /// Connections refused since the last line logged about them, and why: one line a
    /// second at most, however many a flood brings.
    var refusedSinceLog = 0
    var refusalReason = ""
    var lastRefusalLog: Int64 = .min / 2
    private let signalPipe: [Int32]
    let committer: Committer
    /// Turns whose changes are with the writer, oldest first, and what each waits to send.
    var uncommitted: [Batch] = []
    /// Messages from the hub taken this turn: told handled once its changes are committed.
    var turnHubAcks: [HubMessage] = []
    /// Bytes of the replies this turn queued for each connection it fed (`Conn.unreleased`).
    var turnOwed: [ConnectionID: Int] = [:]
    /// A pruning step is due / with the writer.
    var pruneWanted = false
    var pruneInFlight = false
    /// When the last pruning step went to the writer (monotonic milliseconds).
    var lastPruneStep: Int64 = .min / 2
    var conns: [ConnectionID: Conn] = [:]
    /// The connections a dispatch queued output for, each once, reused across turns.
    var touched: [Conn] = []
    /// Connections whose requests wait until they are owed less (`Conn.inputPaused`).
    var pausedInput: [Conn] = []
    var nextID: ConnectionID = 1
    /// Unsent bytes per member, and in all (`Conn.counted`).
    var unsent = Tally()
    /// Replies held for a commit (`Conn.unreleased`), by member and in all: bounded like
    /// unsent bytes, by pausing requests (`mayTakeRequests`).
    var held = Tally()
    /// The bytes connections that have not completed `hello` hold (`Conn.handshakeCounted`).
    var handshakeInput = 0
    /// The bytes the others hold, not yet taken as requests (`Conn.inputCounted`).
    var input = 0
    /// Connections not read further while the others hold their budget (`Conn.heldForInput`);
    /// read again once it has room (`rereadHeldInput`).
    var inputHeld: [Conn] = []
    /// `handshakeInput` or `input` went down since the held connections were last looked at.
    var inputFreed = false
    /// Connections that have not completed `hello`, of each user other than the relay's own.
    var handshaking: [UInt32: Int] = [:]
    var stopping = false
    /// A commit failed and the store could not be read back: the core holds changes the
    /// store never took, so nothing it decides from then on is stored or sent.
    var storeLost = false
    /// A commit failed once the relay was told to stop: `run` reports it.
    var commitFailedWhileStopping = false
    // Times on the monotonic clock, in milliseconds (`Self.monotonicMillis`), as are the
    // connections' own.
    var lastPrune: Int64
    /// A pruning pass under way: its cutoff, and the members whose acknowledged events
    /// may still go (`RelayStore.prune`).
    var pruning: (cutoff: Timestamp, acknowledged: [String: Int64], settled: Int64)?
    /// The store's event positions at the last passes' starts (monotonic milliseconds):
    /// a pass takes the events appended before the latest one old enough (`prune(now:)`).
    var positions: [(at: Int64, position: Int64)] = []
    /// The most changes the loop commits itself when the writer is idle (a light load's
    /// turn); larger batches go to the writer, and the loop reads on meanwhile.
    static let inlineCommitChanges = 64
    /// The most rows (each a commit's events of one member) one pruning step takes.
    static let pruneStepRows = 1000
    var lastTimerScan: Int64 = .min / 2
    var lastCursorFlush: Int64 = .min / 2
    /// The monotonic time of the current turn.
    var turnMillis: Int64 = 0
    /// When the last warning of a low disk was logged, while it stays low.
    var lowDiskWarned: Int64?
    /// After commits failed (a full disk, say): how many in a row, why the last did, and
    /// until when new connections are refused. Clients that reconnected at once would only
    /// fail again, and each failure closes every connection.
    var failedCommits = 0
    var commitFailure = ""
    var refusingUntil: Int64 = .min
    /// The bytes free on the data directory's file system when a commit last failed for a
    /// full disk: once a mebibyte more is free, the refusal ends early.
    var freeAtFullDisk: Int64?
    var scratch = [UInt8](repeating: 0, count: 65536)
    var ready = [cs_ready](repeating: cs_ready(), count: RelayServer.readyPerTurn)
    private var spin: SpinPolicy

    /// The most ready connections one turn takes. A turn's replies and events all go out at
    /// its end, so a turn that took every connection ready after a slow one (hundreds under
    /// load) held all their replies until it had read and handled the lot. Those left over
    /// come first in the next turn: epoll moves the ones it returns to the back of its list.
    private static let readyPerTurn = 32

    static let listenToken: UInt64 = 0
    private static let signalToken: UInt64 = UInt64.max
    private static let committerToken: UInt64 = UInt64.max - 1
    private static let hubToken: UInt64 = UInt64.max - 2
    /// The link to the family hub, when the relay has one (`ServerConfig.hubURL`).
    let bridge: HubBridge?

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
        if pausedInput.contains(where: { mayTakeRequests($0) }) { timeout = 0 }

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
        if inputFreed { rereadHeldInput() }
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
                switch relay.hubMessage(subject: m.subject, body: m.body, deliveries: m.deliveries, sequence: m.streamSequence, now: now) {
                case .held: continue  // not acknowledged: kept for its asking
                case .ignored(let why): log(.info, "from the family hub: \(why)")
                case .applied, .known: break
                }
                turnHubAcks.append(m)
            }
        }
    }

    static func monotonicMillis() -> Int64 { Int64(monotonicNanos() / 1_000_000) }

    private func drainSignals() {
        var b = [UInt8](repeating: 0, count: 16)
        while Glibc.read(signalPipe[0], &b, 16) > 0 {}
        stopping = true
    }

}
