// The relay's rules as a deterministic state machine (wire contract v1). No sockets,
// no clock reads, no store: the reactor feeds frame bodies and the time in, and takes
// out the changes to store (`takeChanges`), the frames to send and the connections to
// close (`drainOutputs`). The reactor commits a turn's changes before it sends anything
// of that turn, and serves replays from the store (`replayPosition`, `continueReplay`).
//
// Layout: this file holds the state and the dispatch of a frame; Member.swift what is
// kept per member and per family; Core+Session.swift the handshake, acks, delivery and
// replay; Core+Child.swift, Core+Guardian.swift and Core+Admin.swift one handler per
// request type; Core+Expiry.swift the timers.

import RelayProtocol
import RelayModel

/// Identifies one connection for the core; chosen by the reactor.
public typealias ConnectionID = Int

/// Why the relay closes a connection. Sent as `closing.reason` where a client can act on it.
public enum CloseReason: String, Sendable {
    case handshakeFailed, framingViolation, sessionReplaced, shutdown, slowConsumer
    case heartbeatTimeout, handshakeTimeout, tokenRotated, memberRemoved, busy, peerClosed, storeFailed
    /// Events a replay was about to send were dropped (retention) meanwhile: connecting
    /// again, the session learns of the gap.
    case eventsDropped
}

/// What the core asks the reactor to do.
public enum CoreOutput: Equatable {
    /// Write this complete frame to the connection.
    case send(ConnectionID, [UInt8])
    /// Close the connection once what was queued before has been written.
    case close(ConnectionID, CloseReason)
}

extension CoreOutput {
    /// The frame to send, taken out so that, unless it is shared, nothing else holds its
    /// buffer (what is left in its place is only a placeholder, for a list about to be emptied).
    mutating func takeFrame() -> [UInt8]? {
        guard case .send(let conn, let frame) = self else { return nil }
        self = .close(conn, .shutdown)
        return frame
    }
}

/// The tunable limits of the relay's rules.
public struct CoreConfig: Sendable {
    /// The relay's version, as `status` reports it (empty: not said).
    public var version = ""
    public var heartbeatSeconds = 15
    public var maxFrameBytes = defaultMaxFrameBytes
    /// 0: no limit.
    public var maxPendingPerChild = 256
    /// Bytes of a child's pending questions (their JSON, avatars included), all held in
    /// memory; 0: no limit. The default holds 64 of the largest a frame carries, as many
    /// as every relay must accept (wire contract §7).
    public var maxPendingBytesPerChild = Self.pendingBytesFor64(maxFrameBytes: defaultMaxFrameBytes)

    /// Room for 64 questions asked in frames of `maxFrameBytes`. A question is held as
    /// validated, which may outgrow the ask that carried it by what validation fills in (a
    /// null avatar for each of up to 64 people, the default choices): well under 4 KiB.
    public static func pendingBytesFor64(maxFrameBytes: Int) -> Int { 64 * (maxFrameBytes + 4096) }

    /// Sustained asks per second per child, in bursts of twice as many; 0 turns rate
    /// limiting off. The default's burst lets a child fill the 64 pending questions every
    /// relay must accept (wire contract §7) at once, as after a time offline.
    public var askRateLimit = 32.0
    public var retentionSeconds: Int64 = 7 * 86400
    /// The relay's own uid: peers with it (or root) may open admin sessions.
    public var relayUID: UInt32 = 0
    /// Bytes of questions in one reply to `pending`, `history` or `questions`, about (at
    /// least one question); keep it under the reactor's output limit, with room to spare.
    public var listReplyBytes = 12 << 20
    /// Events replayed per step before the reactor lets the socket drain.
    public var replayBatch = 512
    /// Bytes replayed per step, about; keep it well under the reactor's output limit.
    public var replayBudgetBytes = 256 * 1024
    /// Durable sessions remembered per member; a new one past it makes the relay forget the
    /// least recently used one that is not open, so a member that names a new session on
    /// every connection cannot grow the relay without bound. 0: no limit.
    public var maxSessionsPerMember = 1024
    /// Handles a guardian's `addKnownHandles` may make a child keep (approvals add past it:
    /// an answer is never refused), so that a guardian's app adding new handles in a loop
    /// cannot grow the relay without bound. 0: no limit.
    public var maxKnownHandlesPerChild = 100_000
    /// This device's name when the relay is linked to a family hub (see Core+Hub.swift):
    /// decisions then go through the hub, where the first one wins for every device.
    public var hubDevice: String?
    /// The families linked to the hub (a device's credentials are for one family); nil: all.
    public var hubFamilies: Set<String>?

    public init() {}
}

public final class RelayCore {
    let config: CoreConfig
    private(set) var startedAt: Timestamp
    /// The changes made since the last `takeChanges`, in order.
    private(set) var changes: [Change] = []
    /// No event is stamped before the one before it, whatever the wall clock does: a
    /// member's events are then in order of time too, and the store drops the oldest of
    /// each stream by time without leaving a hole.
    var eventClock: Timestamp

    // Identity, and each member's streams, sessions, questions and contacts.
    var families: [String: Family] = [:]
    var members: [String: Member] = [:]
    /// The members bound to Unix accounts, by uid (§13: an account is only ever that member).
    var boundMembers: [UInt32: Member] = [:]
    // The questions held (a child's ids are also in its `Member`); the others are read
    // from the archive.
    var questions = QuestionTable()
    let archive: any QuestionArchive
    /// How many times the changes were taken: a change made now goes with take `takes + 1`.
    public private(set) var takes: Int64 = 0
    /// Finished questions, with the take that stores their finishing change: once that
    /// take is committed, the archive has them and they go (`committed(throughTake:)`).
    var settling: [(key: QuestionID, take: Int64)] = []
    var settled = 0
    /// Sessions whose cursor an ack moved since the last `flushCursors`.
    var dirtySessions: [DurableSession] = []
    /// Counts the openings and closings of durable sessions, to tell which was used last.
    var sessionUses: Int64 = 0
    var connections: [ConnectionID: Connection] = [:]
    /// Connections whose session is replaying stored events.
    public internal(set) var replaying: Set<ConnectionID> = []
    // Timers.
    var questionDeadlines = Heap<(at: Timestamp, id: QuestionID)>(by: { $0.at < $1.at })
    var knownDeadlines = Heap<(at: Timestamp, child: Member, handle: NormalizedHandle)>(by: { $0.at < $1.at })
    // Statistics for `status`.
    var framesIn = 0
    var framesOut = 0

    private var outputs: [CoreOutput] = []
    /// Empty buffers of frames already sent (`keepSpareFrames`).
    private var spareFrames: [[UInt8]] = []
    /// Events recorded while a request is handled, delivered after its reply.
    var deferred: [(to: Member, topic: TopicKind?, frame: [UInt8])] = []
    // Linked to a hub: its outbox, and the requests waiting for decisions (by question
    // and asking).
    var hubOutbox: [Int64: HubOutbound] = [:]
    var lastHubOutbound: Int64 = 0
    /// The highest row a known handle was given (`KnownHandleRecord.row`). A row freed
    /// by the handle above every other may be given again: nothing refers to it.
    var lastKnownHandleRow: Int64 = 0
    /// Lists of actions known handles were approved with, each held once for all the
    /// handles that have it (`shared(actions:)`).
    var sharedActions: Set<[String]> = []
    static let sharedActionsLimit = 64
    var hubWaiters: [String: [HubWaiter]] = [:]
    /// The decisions this relay proposed on each asking not decided yet, by message id.
    var hubProposed: [String: Set<String>] = [:]
    /// Decisions that came before their asking, by question and asking.
    var hubEarly: [String: JSONObject] = [:]
    /// This relay's askings not yet back from the hub (by question and asking), with their
    /// outbox rows, where they stay until then: the hub's order decides between two askings
    /// of one attempt (two devices asking one id at once), so until then another device's
    /// that comes first stands instead.
    var hubAskingsOnTheirWay: [String: Int64] = [:]
    /// Askings left behind by one of the same attempt that stood (in this run): their
    /// decisions are left behind too, not held for them.
    var hubLeftBehind: Set<String> = []
    /// Where on the family's hub stream the standing asking of each pending question came
    /// from (in this run): one of the same attempt stored before it there but handed after
    /// it (a message in flight when the link dropped is handed again behind newer ones)
    /// stands instead.
    var hubStandingAt: [String: UInt64] = [:]
    /// How the link to the hub stands, as the reactor last saw it (for `status`).
    public var hubLink: (connected: Bool, lastContact: Timestamp?, inbox: Int?) = (false, nil, nil)
    /// The hub refused this device's credentials at the last try (it was removed).
    public var hubRefused = false

    /// Takes over what `status` counts from the core this one replaces (rebuilt from the
    /// store after a failed commit): the relay's uptime and frames since its start, not the
    /// rebuild's, and the hub link as the reactor last saw it.
    public func carryOver(from previous: RelayCore) {
        startedAt = previous.startedAt
        framesIn += previous.framesIn
        framesOut += previous.framesOut
        hubLink = previous.hubLink
        hubRefused = previous.hubRefused
    }

    /// Builds the core with the live state the store holds (`snapshot`); what is finished
    /// it reads from `archive` when a request needs it.
    public init(config: CoreConfig, snapshot s: StoreSnapshot, archive: any QuestionArchive, now: Timestamp) {
        self.config = config
        self.archive = archive
        self.startedAt = now
        self.eventClock = max(now, s.lastEventAt ?? now)
        for f in s.families { families[f] = Family(id: f) }
        for m in s.members { add(Member(m, family: family(m.family))) }
        questions.reserveCapacity(s.questions.count)
        questions.noteRows(upTo: s.lastQuestionRow)
        for q in s.questions where q.status == .pending {
            questions.save(q)
            guard let child = members[q.child] else { continue }
            child.held.insert(q.key)
            child.pendingAdded(q)
            if let e = q.content.expiration { questionDeadlines.push((e, q.key)) }
        }
        for k in s.knownHandles {
            lastKnownHandleRow = max(lastKnownHandleRow, k.row)  // also a row no child of this relay holds
            guard let child = members[k.child] else { continue }
            child.known[k.handle] = KnownHandle(k, sharing: shared(actions: k.actions))
            if let u = k.until { knownDeadlines.push((u, child, k.handle)) }
        }
        for m in s.hubOutbox {
            hubOutbox[m.id] = m
            if case .ask? = HubNames.parse(m.subject)?.subject { hubAskingsOnTheirWay[m.messageID] = m.id }
        }
        // Never an id given before, also once its message is gone: the bridge reads on from the last it sent.
        lastHubOutbound = max(s.lastHubOutbound, s.hubOutbox.map(\.id).max() ?? 0)
        for sess in s.sessions { members[sess.member]?.sessions[sess.name] = DurableSession(sess) }
        for (id, head) in s.heads { members[id]?.head = head }
        for m in members.values { m.prunedThrough = s.firstRetained[m.id].map { $0 - 1 } ?? m.head }
        for (id, points) in s.restorePoints { members[id]?.restorePoints = points }
    }

    /// The state as the store should hold it once every change taken is committed (and the
    /// cursors of acks flushed): what a restart would load. For tests of that promise.
    public func snapshot() -> StoreSnapshot {
        var s = StoreSnapshot()
        s.families = Array(families.keys)
        s.members = members.values.map(\.record)
        s.questions = questions.records.filter { $0.status == .pending }
        for m in members.values {
            s.knownHandles += m.known.map { $0.value.record(child: m, handle: $0.key) }
            s.sessions += m.sessions.values.map(\.record)
            if m.head > 0 { s.heads[m.id] = m.head }
            if !m.restorePoints.isEmpty { s.restorePoints[m.id] = m.restorePoints }
        }
        s.hubOutbox = hubOutbox.values.sorted { $0.id < $1.id }
        s.lastHubOutbound = lastHubOutbound
        return s.normalized
    }

    /// Records a change to store with this turn's.
    func persist(_ change: consuming Change) {
        switch change {
        case .question(let q), .questionState(let q):
            questions.entry(q.key)?.storedIn = takes + 1
            if q.status != .pending { settling.append((q.key, takes + 1)) }
        default: break
        }
        changes.append(change)
    }

    /// The changes made since the last call, for the reactor to commit before it sends
    /// anything the core has output meanwhile. They are take number `takes` (after the call).
    public func takeChanges() -> [Change] {
        defer { changes.removeAll(keepingCapacity: true) }
        takes += 1
        return changes
    }

    /// The changes of every take up to `take` are committed: the finished questions they
    /// stored are the archive's now, and the core lets them go.
    public func committed(throughTake take: Int64) {
        while settled < settling.count, settling[settled].take <= take {
            let key = settling[settled].key
            settled += 1
            // Re-asked since, or finished again in a later take: not yet.
            guard let entry = questions.entry(key), entry.record.status != .pending, entry.storedIn <= take else { continue }
            questions.removeValue(forKey: key)
            members[entry.record.child]?.held.remove(key)
        }
        if settled > 1024 && settled * 2 > settling.count {
            settling.removeFirst(settled)
            settled = 0
        }
    }

    /// The question `key`, held or stored.
    func question(_ key: QuestionID) throws(RequestError) -> QuestionRecord? {
        if let entry = questions.entry(key) { return entry.record }
        do {
            return try archive.question(key)
        } catch {
            throw Self.readFailure("question \(key)", error)
        }
    }

    /// A read of the store that failed: `busy` for what may pass, `internal` for damage,
    /// which no retry mends and the relay's operator must see to.
    static func readFailure(_ what: String, _ error: any Error) -> RequestError {
        guard (error as? StoreReadError)?.isDamaged == true else {
            return RequestError(.busy, "could not read \(what) from the store (\(error)); try again")
        }
        return RequestError(
            .internal, "\(what) cannot be read: the relay's store is damaged (\(error)); its operator should run `permission-relay check`")
    }

    /// The questions of `child` held, in order of first asking.
    func heldQuestions(of child: Member) -> [QuestionRecord] {
        child.held.compactMap { questions[$0] }.sorted { $0.row < $1.row }
    }

    /// Whether changes wait for `takeChanges`.
    public var hasChanges: Bool { !changes.isEmpty }

    deinit {
        // Families and their members refer to each other, and members and their connections.
        for f in families.values {
            f.guardians = []
            f.children = []
        }
        for m in members.values { m.live = [] }
    }

    /// The family `id`, made if it is not known yet.
    func family(_ id: String) -> Family {
        if let f = families[id] { return f }
        let f = Family(id: id)
        families[id] = f
        return f
    }

    /// Files a member under its id and, unless removed, in its family.
    func add(_ m: Member) {
        members[m.id] = m
        guard !m.isRemoved else { return }
        if let uid = m.record.unixUID { boundMembers[uid] = m }
        if m.record.role == .guardian { m.family.guardians.append(m) } else { m.family.children.append(m) }
    }

    /// Calls `body` with each frame to send and connection to close, in order, since the
    /// last call (outputs `body` causes included). The list's buffer is kept for the next
    /// turn: handing it out as an array left the core a new one to allocate each turn.
    public func drainOutputs(_ body: (CoreOutput) -> Void) {
        var i = 0
        while i < outputs.count {
            body(outputs[i])
            i += 1
        }
        keepSpareFrames()
        outputs.removeAll(keepingCapacity: true)
    }

    /// Keeps the drained frames' buffers for the next frames: nearly every frame is built,
    /// copied into its connection's buffer and dropped, and allocating a buffer for each
    /// cost more than the copy. Small ones only, and as many as a busy turn makes.
    private func keepSpareFrames() {
        for k in outputs.indices where spareFrames.count < 1024 {
            guard var frame = outputs[k].takeFrame(), frame.capacity <= 4096 else { continue }
            frame.removeAll(keepingCapacity: true)
            spareFrames.append(frame)
        }
    }

    /// A frame whose body `writeBody` appends, built in a spare buffer when there is one.
    func frame(capacity: Int, _ writeBody: (inout [UInt8]) -> Void) -> [UInt8] {
        RelayProtocol.frame(capacity: capacity, in: spareFrames.popLast() ?? [], writeBody)
    }

    /// The outputs `drainOutputs` would give, as a list.
    public func takeOutputs() -> [CoreOutput] {
        var taken: [CoreOutput] = []
        drainOutputs { taken.append($0) }
        return taken
    }

    func send(_ conn: ConnectionID, _ frame: [UInt8]) {
        framesOut += 1
        if conn == countedConnection { countedBytes += frame.count }
        outputs.append(.send(conn, frame))
    }

    /// What admins (and guardians, for limits) changed, in words, for the log: taken with
    /// the turn's changes, and logged once they are committed.
    private var notes: [String] = []

    /// The notes since the last call.
    public func takeNotes() -> [String] {
        defer { notes.removeAll() }
        return notes
    }

    /// Notes `what` the sender of `r` changed.
    func note(_ r: Request, _ what: String) {
        let who =
            r.session.role == .admin
            ? "admin (uid \(connections[r.conn]?.peerUID.map(String.init) ?? "unknown"))" : "\(r.session.role.rawValue) \(r.member.id)"
        notes.append("\(who) \(what)")
    }

    /// The connection whose frames `countedBytes` counts, from when it is set: the reactor
    /// holds back a connection's further requests while what it is owed is large.
    public var countedConnection: ConnectionID? {
        didSet { countedBytes = 0 }
    }
    /// Bytes of the frames queued for `countedConnection` since it was set.
    public private(set) var countedBytes = 0

    func send(_ conn: ConnectionID, _ object: JSONObject) { send(conn, object.frame) }

    /// Closes `conn` after what is queued for it, forgetting its session at once.
    func close(_ conn: ConnectionID, _ reason: CloseReason, notify: Bool = true) {
        guard connections[conn] != nil else { return }
        if notify { send(conn, ["type": "closing", "reason": .string(reason.rawValue)]) }
        forget(conn)
        outputs.append(.close(conn, reason))
    }

    // MARK: - Connections

    /// A new connection from a peer with `uid`.
    public func connected(_ conn: ConnectionID, peerUID: UInt32?) {
        connections[conn] = Connection(id: conn, peerUID: peerUID)
    }

    /// The peer went away (or the reactor closed the connection).
    public func disconnected(_ conn: ConnectionID) { forget(conn) }

    private func forget(_ conn: ConnectionID) {
        guard let c = connections.removeValue(forKey: conn) else { return }
        replaying.remove(conn)
        if c.hubWaiting > 0 { forgetHubWaiters(of: conn) }  // a scan of every question waited on
        c.session?.member?.live.removeAll { $0 === c }
        if let durable = c.session?.durable { durable.lastUse = nextSessionUse() }
    }

    /// Whether the connection's session is still replaying; the reactor holds back its
    /// further frames until `continueReplay` has caught it up.
    public func isReplaying(_ conn: ConnectionID) -> Bool { !replaying.isEmpty && replaying.contains(conn) }

    /// Whether the reactor may feed `conn` its next frame: it is open and not replaying.
    public func takesFrames(_ conn: ConnectionID) -> Bool { connections[conn] != nil && !isReplaying(conn) }

    /// The member whose session `conn` holds (nil before hello and for admin sessions).
    public func member(of conn: ConnectionID) -> String? { connections[conn]?.session?.member?.id }

    /// Whether `conn` has completed `hello`.
    public func isEstablished(_ conn: ConnectionID) -> Bool { connections[conn]?.session != nil }

    // MARK: - Frames

    /// One frame body received on `conn`.
    public func receive(_ conn: ConnectionID, body: [UInt8], now: Timestamp) {
        body.withUnsafeBufferPointer { receive(conn, body: $0, now: now) }
    }

    /// One frame body received on `conn`, read in place (the core keeps no pointer to it).
    public func receive(_ conn: ConnectionID, body: UnsafeBufferPointer<UInt8>, now: Timestamp) {
        guard let c = connections[conn] else { return }
        framesIn += 1
        expireDue(now: now)
        let established = c.session != nil
        if let session = c.session, receiveCommon(conn, session, body, now: now) { return }

        let parsed: JSON
        do {
            parsed = try JSON.parse(body)
        } catch {
            guard error.isJSON else {
                reject(conn, re: nil, established, .badFrame, "the frame is not valid UTF-8 JSON: \(error)")
                return
            }
            // Refused by the parser, a frame may still be JSON. Half a surrogate pair escaped
            // alone is, though no text holds it: read as U+FFFD (unknown fields are ignored,
            // whatever they hold). One nested too deep is refused, its error carrying its id (§1).
            do {
                let read = try JSON.parseLeniently(body)
                guard !read.truncated else {
                    let message = "the frame nests arrays and objects deeper than \(JSON.maxDepth) levels"
                    reject(conn, re: read.json["id"]?.string, established, .badFrame, message)
                    return
                }
                parsed = read.json
            } catch {
                reject(conn, re: nil, established, .badFrame, "the frame is not valid UTF-8 JSON: \(error)")
                return
            }
        }
        guard case .object(let frame) = parsed else {
            reject(conn, re: nil, established, .badFrame, "the frame must be a JSON object")
            return
        }
        let id = frame["id"]?.string
        guard let type = frame["type"]?.string else {
            reject(conn, re: id, established, .badFrame, "the frame has no string \"type\"")
            return
        }
        guard let session = c.session else {
            guard type == "hello" else {
                reject(conn, re: id, false, .unauthorized, "the first frame must be hello")
                return
            }
            hello(conn, frame, id: id, now: now)
            return
        }

        switch type {
        case "ping":
            send(conn, ["type": "pong"])
        case "pong":
            break
        case "ack":
            guard let seq = frame["seq"]?.seq else {
                send(conn, RequestError(.badRequest, "ack needs a non-negative integer \"seq\"").frame(re: id))
                return
            }
            ack(session, upTo: seq)
        case "hello":
            reply(conn, id, .failure(RequestError(.badRequest, "this connection has already said hello")))
        default:
            guard let handler = Self.handlers.first(where: { $0.key == type })?.value else {
                reply(conn, id, .failure(RequestError(.unknownType, "unknown frame type \"\(type)\"")))
                return
            }
            guard let id else {
                reply(conn, nil, .failure(RequestError(.badRequest, "a \(type) request needs a string \"id\"")))
                return
            }
            let result: Result<ReplyFields, RequestError>
            if !handler.roles.contains(session.role) {
                let who = session.member.map { "\($0.record.id) is a \(session.role.rawValue)" } ?? "this is an admin session"
                let whom = handler.roles.map(\.rawValue).joined(separator: " or ")
                let article = whom.first.map { "aeiou".contains($0) } == true ? "an" : "a"
                result = .failure(RequestError(.forbidden, "\(type) is for \(article) \(whom), and \(who)"))
            } else {
                result = Result { () throws(RequestError) in
                    try handler.run(self, Request(conn: conn, id: id, session: session, frame: frame, now: now))
                }
            }
            reply(conn, id, result)
        }
    }

    /// Handles the frames of an established session that are most frequent, in their common
    /// shape, read straight from their bytes: asks, answers, acks. False for any other frame.
    private func receiveCommon(_ conn: ConnectionID, _ session: Session, _ body: UnsafeBufferPointer<UInt8>, now: Timestamp) -> Bool {
        if session.role == .child, let (id, question) = QuestionContent.readAsk(body, now: now) {
            reply(
                conn, id,
                Result { () throws(RequestError) in
                    try ask(question, Request(conn: conn, id: id, session: session, frame: [:], now: now))
                })
            return true
        }
        switch FlatRequest.read(body) {
        case .ack(let seq)?:
            ack(session, upTo: seq)
        case .answer(let id, let question, let choice)? where session.role == .guardian:
            reply(
                conn, id,
                Result { () throws(RequestError) in
                    try answer(question, choice: choice, Request(conn: conn, id: id, session: session, frame: [:], now: now))
                })
        default:
            return false
        }
        return true
    }

    /// An error for a frame that could not be read; before hello it also ends the connection.
    private func reject(_ conn: ConnectionID, re: String?, _ established: Bool, _ code: ErrorCode, _ message: String) {
        if established {
            send(conn, RequestError(code, message).frame(re: re))
        } else {
            send(conn, RequestError(.unauthorized, "hello required first: \(message)").frame(re: re))
            close(conn, .handshakeFailed, notify: false)
        }
    }

    /// Sends the reply to a request, then the events the request caused.
    func reply(_ conn: ConnectionID, _ id: String?, _ result: Result<ReplyFields, RequestError>) {
        switch result {
        case .success(.object(let o)):
            send(conn, okFrame(re: id) { o.encodeFields(into: &$0) })
        case .success(.frame(let bytes)):
            send(conn, bytes)
        case .success(.later):
            break
        case .failure(let e):
            send(conn, e.frame(re: id))
        }
        flushDeferred()
    }

    /// An `ok` reply to request `id`, as a frame; `writeFields` appends the fields after `re`.
    func okFrame(re id: String?, capacity: Int = 256, _ writeFields: (inout [UInt8]) -> Void) -> [UInt8] {
        frame(capacity: capacity) { out in
            out.append(literal: #"{"type":"ok""#)
            if let id { out.appendJSONField("re", id) }
            writeFields(&out)
            out.append(UInt8(ascii: "}"))
        }
    }

    // MARK: - Request table

    struct Request {
        let conn: ConnectionID
        /// The request's id, which its reply carries as `re`.
        let id: String
        let session: Session
        let frame: JSONObject
        let now: Timestamp

        /// The sender: every request but an admin's has one.
        var member: Member { session.member! }

        func string(_ key: String) throws(RequestError) -> String {
            guard let s = frame[key]?.string else { throw RequestError(.badRequest, "\"\(key)\" must be a string") }
            return s
        }

        func optionalString(_ key: String) throws(RequestError) -> String? {
            switch frame[key] {
            case nil, .null?: return nil
            case .string(let s)?: return s
            default: throw RequestError(.badRequest, "\"\(key)\" must be a string")
            }
        }

        func bool(_ key: String) throws(RequestError) -> Bool {
            guard let b = frame[key]?.bool else { throw RequestError(.badRequest, "\"\(key)\" must be true or false") }
            return b
        }

        func handles(_ key: String) throws(RequestError) -> [NormalizedHandle] {
            guard let list = frame[key]?.array else {
                throw RequestError(.badRequest, "\"\(key)\" must be an array of handles")
            }
            var out: [NormalizedHandle] = []
            var seen = Set<NormalizedHandle>(minimumCapacity: list.count)  // a frame may hold tens of thousands
            for (i, h) in list.enumerated() {
                guard let n = NormalizedHandle(json: h) else {
                    throw RequestError(.badRequest, "\(key)[\(i)] \(NormalizedHandle.whyInvalid(h))")
                }
                if seen.insert(n).inserted { out.append(n) }
            }
            return out
        }
    }

    struct Handler: Sendable {
        let roles: [Role]  // one or two: a scan, not a hash
        let run: @Sendable (RelayCore, Request) throws(RequestError) -> ReplyFields
    }

    /// Which role may send what (§7). A list, the most frequent first: comparing a few short
    /// strings costs less than hashing one.
    static let handlers: KeyValuePairs<String, Handler> = [
        "ask": Handler(roles: [.child]) { c, r throws(RequestError) in try c.ask(r) },
        "answer": Handler(roles: [.guardian]) { c, r throws(RequestError) in try c.answer(r) },
        "subscribe": Handler(roles: [.child]) { c, r throws(RequestError) in try c.subscribe(r) },
        "cancel": Handler(roles: [.child]) { c, r throws(RequestError) in try c.cancel(r) },
        "questions": Handler(roles: [.child]) { c, r throws(RequestError) in try c.listQuestions(r) },
        "limits": Handler(roles: [.child]) { c, r throws(RequestError) in try c.limits(r) },
        "knownHandles": Handler(roles: [.child]) { c, r throws(RequestError) in try c.knownHandles(r) },
        "pending": Handler(roles: [.guardian]) { c, r throws(RequestError) in try c.pending(r) },
        "setLimits": Handler(roles: [.guardian, .admin]) { c, r throws(RequestError) in try c.setLimits(r) },
        "addKnownHandles": Handler(roles: [.guardian]) { c, r throws(RequestError) in try c.changeKnownHandles(r, add: true) },
        "removeKnownHandles": Handler(roles: [.guardian]) { c, r throws(RequestError) in
            try c.changeKnownHandles(r, add: false)
        },
        "history": Handler(roles: [.guardian]) { c, r throws(RequestError) in try c.history(r) },
        "familyLink": Handler(roles: [.child, .guardian]) { c, r throws(RequestError) in c.familyLink(r) },
        "createFamily": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.createFamily(r) },
        "addMember": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.addMember(r) },
        "removeMember": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.removeMember(r) },
        "rotateToken": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.rotateToken(r) },
        "status": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.status(r) },
        "families": Handler(roles: [.admin]) { c, r throws(RequestError) in try c.listFamilies(r) },
    ]
}

/// An `ok` reply: its fields after `type` and `re`, or (for the requests sent most,
/// written in place by `okFrame`) the whole frame.
extension ReplyFields {
    /// The same fields and `more` after them.
    func adding(_ more: JSONObject) -> ReplyFields {
        guard case .object(var o) = self else { return self }
        for f in more.fields { o[f.key] = f.value }
        return .object(o)
    }
}

enum ReplyFields: ExpressibleByDictionaryLiteral {
    case object(JSONObject)
    case frame([UInt8])
    /// None now: the request is answered later (a decision proposed to the hub).
    case later

    init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(JSONObject(elements.map { JSONObject.Field($0.0, $0.1) }))
    }
}

/// A connection as the core sees it. A class: it is looked at for every frame and every
/// event delivered, and a struct would be copied out whole each time.
final class Connection {
    let id: ConnectionID
    let peerUID: UInt32?
    var session: Session?
    /// Its requests waiting for the hub's decisions (`hubWaiters`).
    var hubWaiting = 0

    init(id: ConnectionID, peerUID: UInt32?) {
        self.id = id
        self.peerUID = peerUID
    }
}

/// An established session: who it is and what it receives. A class, like `Connection`:
/// a struct holding three references was copied, and each retained and released, at
/// every look from a frame or an event delivered.
final class Session {
    let role: Role
    /// nil for admin sessions.
    let member: Member?
    /// The durable session, or nil for an ephemeral one.
    var durable: DurableSession?
    var family: Family? { member?.family }
    var topics: Set<TopicKind> = []
    /// While replaying: the last seq considered; nil once live.
    var replayAfter: Int64?

    init(role: Role, member: Member? = nil) {
        self.role = role
        self.member = member
    }
}

/// A token bucket: `rate` per second sustained, bursts up to `capacity`.
struct TokenBucket {
    var tokens: Double
    var last: Timestamp

    mutating func take(rate: Double, capacity: Double, now: Timestamp) -> Bool {
        tokens = min(capacity, tokens + Double(max(0, now.milliseconds - last.milliseconds)) / 1000 * rate)
        last = now
        guard tokens >= 1 else { return false }
        tokens -= 1
        return true
    }
}

extension RelayCore {
    /// The stream broke a framing rule: answer with `code` and close (§1).
    public func framingViolation(_ conn: ConnectionID, _ code: ErrorCode, _ message: String) {
        guard connections[conn] != nil else { return }
        send(conn, RequestError(code, message).frame(re: nil))
        close(conn, .framingViolation, notify: false)
    }

    /// The reactor ends a connection for its own reason (timeouts, shutdown).
    public func drop(_ conn: ConnectionID, _ reason: CloseReason) { close(conn, reason) }

    /// Whether the core still considers `conn` open.
    public func isOpen(_ conn: ConnectionID) -> Bool { connections[conn] != nil }
}
