// Session start (§4), acks and cursors, and delivery of stream events (§6): live to
// every session of the member that passes its subscriptions, or replayed after a cursor
// from what the reactor reads from the store, in bounded steps so that a long replay
// cannot flood a socket.

import RelayProtocol
import RelayModel

extension RelayCore {
    func hello(_ conn: ConnectionID, _ f: JSONObject, id: String?, now: Timestamp) {
        func refuse(_ code: ErrorCode, _ message: String) {
            send(conn, RequestError(code, message).frame(re: id))
            close(conn, .handshakeFailed, notify: false)
        }
        // Before a hello succeeds, a frame that is not a valid one gets unauthorized "instead"
        // of the code it would get after (§1): a hello without a protocol or an id too. One
        // that asks for another protocol is unsupportedProtocol (§4).
        guard let proto = f["protocol"] else { return refuse(.unauthorized, "hello needs \"protocol\": 1") }
        guard proto.int == 1 else {
            // A number too large for a double reads as infinite, which JSON writes as null.
            let outOfRange = proto != .null && proto.text == "null"
            let asked = proto.int.map(String.init) ?? "\"protocol\": \(outOfRange ? "a number out of range" : proto.text)"
            // The version as a string is the likeliest slip: say what to send instead.
            let hint = proto.string == "1" ? " (send the number 1, not a string)" : ""
            return refuse(.unsupportedProtocol, "this relay speaks protocol 1, not \(asked)\(hint)")
        }
        guard let id else { return refuse(.unauthorized, "hello needs a string \"id\", which its welcome answers") }

        switch f["admin"] {
        case nil, .bool(false)?: break
        case .bool(true)? where f["member"] != nil || f["token"] != nil:
            return refuse(.unauthorized, "a hello is a member's (member and token) or an admin's (admin: true), not both")
        case .bool(true)?: break
        case let other?: return refuse(.unauthorized, "admin must be true or false, not \(other.text)")
        }
        if f["admin"]?.bool == true {
            let uid = connections[conn]?.peerUID
            guard let uid, uid == 0 || uid == config.relayUID else {
                return refuse(.unauthorized, "admin sessions are only for the relay's own user and root")
            }
            connections[conn]?.session = Session(role: .admin)
            var welcome: JSONObject = ["type": "welcome"]
            welcome["re"] = .string(id)
            welcome["role"] = "admin"
            welcome["heartbeatSeconds"] = .int(Int64(config.heartbeatSeconds))
            welcome["maxFrameBytes"] = .int(Int64(config.maxFrameBytes))
            send(conn, welcome)
            return
        }

        // The refusals say the same whether or not the member exists.
        let memberID = f["member"]?.string
        let m = memberID.flatMap { members[$0] }.flatMap { $0.isRemoved ? nil : $0 }
        // A bound account is only ever its member (§13), whatever token it shows.
        if let uid = connections[conn]?.peerUID, let bound = boundMembers[uid], bound !== m {
            return refuse(
                .unauthorized,
                "this Unix account (uid \(uid)) is bound to member \"\(bound.id)\", and says hello only as that member")
        }
        if let token = f["token"], token.string == nil, token != .null {
            return refuse(.unauthorized, "\"token\" must be a string, not \(token.text)")
        }
        if let token = f["token"]?.string {
            guard let m, Token.matches(token, m.record.tokenHash) else { return refuse(.unauthorized, "unknown member or wrong token") }
        } else {
            // No token: the member must be bound to the account at the other end (SO_PEERCRED).
            let uid = connections[conn]?.peerUID
            guard let memberID else {
                return refuse(.unauthorized, "hello needs \"member\" and its \"token\" (or \"admin\": true, for the relay's own user)")
            }
            guard let m, let bound = m.record.unixUID, bound == uid else {
                return refuse(
                    .unauthorized,
                    "hello needs a token: no member \"\(memberID)\" is bound to this Unix account"
                        + " (uid \(uid.map(String.init) ?? "unknown"))")
            }
        }
        guard let m, let memberID else { return }  // both checked above

        var sessionName: String?
        switch f["session"] {
        case nil, .null?: break
        case .string(let s)? where Identifier.isValid(s): sessionName = s
        default: return refuse(.unauthorized, "session must match [A-Za-z0-9._-]{1,64}")
        }
        var resume: Int64?
        switch f["resume"] {
        case nil, .null?: break
        case _ where sessionName == nil: break  // an ephemeral session ignores it (§4)
        case let v? where v.seq != nil: resume = v.seq
        default: return refuse(.unauthorized, "resume must be a non-negative integer seq")
        }

        // A child may name its topics in the hello (protocol.md), so that its replay passes them
        // even in a session the relay does not know (forgotten, or newer than a restored backup).
        // Kinds this relay does not know are left out: a newer client is not locked out.
        var topics: Set<TopicKind>?
        if m.record.role == .child, let value = f["topics"], value != .null {
            guard let list = value.array, list.allSatisfy({ $0.string != nil }) else {
                return refuse(.unauthorized, "topics must be an array of topic kinds, such as [\"communication\"]")
            }
            topics = Set(list.compactMap { $0.string.flatMap(TopicKind.init(rawValue:)) })
        }

        let head = m.head
        let session = Session(role: m.record.role, member: m)
        if let topics { session.topics = topics }
        var welcome: JSONObject = ["type": "welcome"]
        welcome["re"] = .string(id)
        welcome["member"] = .string(memberID)
        welcome["role"] = .string(m.record.role.rawValue)
        welcome["family"] = .string(m.family.id)
        welcome["head"] = .int(head)
        welcome["heartbeatSeconds"] = .int(Int64(config.heartbeatSeconds))
        welcome["maxFrameBytes"] = .int(Int64(config.maxFrameBytes))
        if let name = sessionName {
            // A second connection of the same durable session replaces the first.
            for other in m.live where other.session?.durable?.record.name == name {
                close(other.id, .sessionReplaced)
            }
            let existing = m.sessions[name]
            if existing == nil, !makeRoomForSession(of: m) {
                let open = "\(memberID) already has as many durable sessions open as the relay allows (\(m.sessions.count))"
                return refuse(.busy, "\(open); close one, or connect without a session")
            }
            // A new session starts at the head, having acknowledged none of the events before it:
            // they stay for others that resume (§6) until it acknowledges a later one.
            var record =
                existing?.record
                ?? SessionRecord(member: memberID, name: name, cursor: head, acknowledged: m.prunedThrough, topics: [])
            var start = record.cursor
            if let resume {
                // What the client has processed: from the cursor up, acknowledged, as by an
                // `ack`; below it, it changes nothing (§4, §6).
                start = min(resume, head)
                if start >= record.cursor || existing == nil { (record.cursor, record.acknowledged) = (start, start) }
            }
            if let topics { record.topics = topics }
            let durable = existing ?? DurableSession(record)
            if existing == nil || record != durable.record {
                durable.record = record
                m.sessions[name] = durable
                persist(.session(record))
            }
            // Events up to `prunedThrough` are gone: the replay starts after them, and says so.
            // So are those a client had after a backup that was restored: one that resumes
            // past the backup's events starts after the jump the restore made.
            var gap = start < m.prunedThrough
            if gap { start = m.prunedThrough }
            if let point = m.restorePoints.first(where: { start > $0.through && start < $0.head }) {
                (gap, start) = (true, point.head)
            }
            durable.lastUse = nextSessionUse()
            session.durable = durable
            session.topics = record.topics
            session.replayAfter = start < head ? start : nil
            welcome["session"] = .string(name)
            welcome["cursor"] = .int(start)
            if gap { welcome["gap"] = true }
        }
        guard let c = connections[conn] else { return }
        c.session = session
        if session.replayAfter != nil { replaying.insert(conn) }
        m.live.append(c)
        send(conn, welcome)
    }

    /// Before `member` gets a new durable session: at the limit, forgets the least recently
    /// used one that no connection holds (after a restart, the one that acknowledged least). False
    /// when every one is open.
    private func makeRoomForSession(of member: Member) -> Bool {
        let limit = config.maxSessionsPerMember
        guard limit > 0, member.sessions.count >= limit else { return true }
        let open = Set(member.live.compactMap { $0.session?.durable.map(ObjectIdentifier.init) })
        let idle = member.sessions.values.filter { !open.contains(ObjectIdentifier($0)) }
        guard
            let oldest = idle.min(by: {
                ($0.lastUse, $0.record.acknowledged, $0.record.name) < ($1.lastUse, $1.record.acknowledged, $1.record.name)
            })
        else { return false }
        oldest.dirty = false  // its row goes now: no late cursor write
        member.sessions[oldest.record.name] = nil
        persist(.dropSession(member: member.id, name: oldest.record.name))
        return makeRoomForSession(of: member)  // a lowered limit may leave more than one over
    }

    func nextSessionUse() -> Int64 {
        sessionUses += 1
        return sessionUses
    }

    /// Moves the session's cursor, and how far it has acknowledged, up to `seq` (never past
    /// its stream's head, never back: an ack below the cursor changes nothing, §6).
    func ack(_ session: Session, upTo seq: Int64) {
        guard let member = session.member, let durable = session.durable else { return }
        let target = min(seq, member.head)
        // At the cursor, it acknowledges what a session that started at the head had not.
        guard target >= durable.record.cursor, target > durable.record.acknowledged else { return }
        (durable.record.cursor, durable.record.acknowledged) = (target, target)
        if !durable.dirty {
            durable.dirty = true
            dirtySessions.append(durable)
        }
    }

    /// Writes the cursors moved by acks since the last call (acks are stored lazily).
    public func flushCursors() {
        for durable in dirtySessions where durable.dirty {
            durable.dirty = false
            persist(.session(durable.record))
        }
        dirtySessions.removeAll(keepingCapacity: true)
    }

    /// Appends an event of `type` with `fields` to `member`'s stream; it is delivered after
    /// the current reply.
    func appendEvent(to member: Member, topic: TopicKind?, type: StaticString, _ fields: JSONObject, now: Timestamp) {
        appendEvent(to: member, topic: topic, type: type, capacity: 128, now: now) { fields.encodeFields(into: &$0) }
    }

    /// Appends the same event to each of `members`: its fields are written once, into the
    /// first one's frame, and copied from there into the others'.
    func appendEvent(
        to members: [Member], topic: TopicKind?, type: StaticString, capacity: Int, now: Timestamp,
        _ writeFields: (inout [UInt8]) -> Void
    ) {
        guard let first = members.first else { return }
        var start = 0
        let written = appendEvent(to: first, topic: topic, type: type, capacity: capacity, now: now) { out in
            start = out.count
            writeFields(&out)
        }
        let fields = written[start..<(written.count - 1)]  // up to the closing brace
        for m in members.dropFirst() {
            appendEvent(to: m, topic: topic, type: type, capacity: fields.count, now: now) { $0.append(bytes: fields) }
        }
    }

    /// Appends an event whose fields after `type` and `seq` (about `capacity` bytes, each
    /// after a comma) `writeFields` writes straight into its frame; returns the frame.
    @discardableResult
    func appendEvent(
        to member: Member, topic: TopicKind?, type: StaticString, capacity: Int, now: Timestamp,
        _ writeFields: (inout [UInt8]) -> Void
    ) -> [UInt8] {
        member.head += 1
        let seq = member.head
        eventClock = max(eventClock, now)
        let bytes = frame(capacity: capacity + 48) { out in
            out.appendEventHead(type: type, seq: seq)
            writeFields(&out)
            out.append(UInt8(ascii: "}"))
        }
        persist(.event(EventRecord(member: member.id, seq: seq, at: eventClock, topic: topic, frame: bytes)))
        deferred.append((member, topic, bytes))
        return bytes
    }

    /// Sends the events recorded so far to the live sessions that should get them.
    func flushDeferred() {
        guard !deferred.isEmpty else { return }
        // Sending records nothing new, so the list is read in place and then emptied (a
        // copy taken first would make the emptying allocate a new buffer every time).
        for i in deferred.indices {
            for c in deferred[i].to.live {
                guard let session = c.session, session.replayAfter == nil else { continue }
                if let t = deferred[i].topic, !session.topics.contains(t) { continue }
                send(c.id, deferred[i].frame)
            }
        }
        deferred.removeAll(keepingCapacity: true)
    }

    /// Where the replay of `conn` goes on from: its member, and the seq after which it
    /// wants events. Nil when `conn` is not replaying.
    public func replayPosition(_ conn: ConnectionID) -> (member: String, after: Int64)? {
        guard let s = connections[conn]?.session, let after = s.replayAfter, let member = s.member else { return nil }
        return (member.id, after)
    }

    /// Sends the next step of `conn`'s replay: `stored`, what the store gave for its
    /// `replayPosition` (in order; at most `limit` events), up to about `replayBudgetBytes`;
    /// once the store had no more, this turn's events (the reactor replays only when no
    /// other changes wait to be committed). The session goes live when it has caught up
    /// with its stream's head. An event missing on the way ends the connection instead (a
    /// replay never skips one): the returned text says why, for the log.
    public func continueReplay(_ conn: ConnectionID, stored: [EventRecord], limit: Int) -> String? {
        guard let s = connections[conn]?.session, let after = s.replayAfter, let member = s.member else { return nil }
        var last = after
        var bytes = 0
        /// A hole before the first event the store gives (or where it gives none) is where
        /// the oldest events were dropped: pruning drops nothing else. One after an event of
        /// the step is damage.
        func broken(next: Int64?) -> String? {
            let prefix = last == after && (stored.isEmpty || stored.first?.seq == next)
            return replayBroken(conn, member, missing: member.seq(after: last), next: next, prefix: prefix)
        }
        func deliver(_ e: EventRecord) -> Bool {
            guard e.seq == member.seq(after: last) else { return false }
            if e.topic.map(s.topics.contains) ?? true {
                send(conn, e.frame)
                bytes += e.frame.count
            }
            last = e.seq
            return true
        }
        for e in stored {
            guard deliver(e) else { return broken(next: e.seq) }
            if bytes >= config.replayBudgetBytes {
                s.replayAfter = last
                return nil
            }
        }
        guard stored.count < limit else {
            s.replayAfter = last
            return nil
        }
        // This turn's events, after those the store gave.
        for case .event(let e) in changes where e.seq > last && e.member == member.id {
            guard deliver(e) else { return broken(next: e.seq) }
        }
        guard member.seq(after: last) == member.seq(after: member.head) else { return broken(next: nil) }
        s.replayAfter = nil
        replaying.remove(conn)
        return nil
    }

    /// The store could not be read for `conn`'s replay: it is told so and closed (its
    /// session resumes from the same cursor when it connects again).
    public func replayFailed(_ conn: ConnectionID, _ why: String) {
        guard connections[conn] != nil else { return }
        send(conn, RequestError(.internal, "the relay could not read your stored events (\(why)); connect again later").frame(re: nil))
        close(conn, .storeFailed)
    }

    /// Ends a replay that found event `seq` missing, `next` the event found in its place
    /// (nil: none up to the head). Among the oldest (`prefix`), it was dropped while the
    /// replay ran: the session learns of the gap when it connects again (`welcome.gap`).
    /// Otherwise the store lost it, which is told and logged.
    private func replayBroken(_ conn: ConnectionID, _ member: Member, missing seq: Int64, next: Int64?, prefix: Bool) -> String? {
        if seq <= member.prunedThrough || prefix {
            member.prunedThrough = max(member.prunedThrough, (next ?? member.head + 1) - 1)
            close(conn, .eventsDropped)
            return nil
        }
        let why = "event \(seq) of \(member.id)'s stream is missing from the store; run permission-relay check"
        replayFailed(conn, why)
        return why
    }

    /// The store dropped `member`'s events up to `seq` (`RelayStore.prune`).
    public func eventsDropped(member: String, through seq: Int64) {
        guard let m = members[member] else { return }
        m.prunedThrough = max(m.prunedThrough, seq)
    }

    /// For each member with events stored that every one of its durable sessions has
    /// acknowledged, how far: those may be dropped early (§6).
    public func acknowledgedByAllSessions() -> [String: Int64] {
        var out: [String: Int64] = [:]
        for (id, member) in members where !member.sessions.isEmpty {
            guard let acknowledged = member.sessions.values.lazy.map(\.record.acknowledged).min(),
                acknowledged > member.prunedThrough
            else { continue }
            out[id] = acknowledged
        }
        return out
    }
}

extension JSON {
    /// A seq a client gives (`ack`, `resume`): a whole number from 0; one too large for 64
    /// bits is above every head, and counts as the head as any other above it does (§4, §6).
    var seq: Int64? { wholeNumber.flatMap { $0 >= 0 ? $0 : nil } }
}
