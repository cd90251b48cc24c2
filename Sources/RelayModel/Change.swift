// What the core emits for the store: each change to the state it keeps, as a value. A
// loop turn's changes are committed together, in one transaction, before anything the
// turn decided is sent (wire contract §9). `StoreSnapshot.apply` says what each change
// means, once: the in-memory store is that fold, and tests hold the SQLite store to it.

import RelayProtocol

/// One change to the relay's durable state.
public enum Change: Sendable, Equatable {
    case family(String)
    /// A member added, or changed (token, limits, removed).
    case member(MemberRecord)
    /// A question asked, or asked again: stored whole, under its row.
    case question(QuestionRecord)
    /// A stored question's status, attempt and outcome changed (its content did not).
    case questionState(QuestionRecord)
    case knownHandle(KnownHandleRecord)
    /// A known handle forgotten (removed, or its time ran out).
    case unknownHandle(KnownHandleRecord)
    /// A durable session made, or its cursor or topics changed.
    case session(SessionRecord)
    /// Every durable session of a member forgotten.
    case dropSessions(member: String)
    /// One durable session forgotten.
    case dropSession(member: String, name: String)
    /// An event appended to a member's stream.
    case event(EventRecord)
    /// A message for the family hub, kept until the hub has stored it.
    case hubOutbound(HubOutbound)
    /// The hub stored (or refused for good) the outbox's message `id`: it goes.
    case hubSent(id: Int64)
}

/// Everything the core keeps in memory, as loaded at start: what is live. Finished
/// questions stay in the store only (`QuestionArchive`).
public struct StoreSnapshot: Sendable, Equatable {
    public var families: [String] = []
    public var members: [MemberRecord] = []
    /// The pending questions, in order of their rows (of first asking).
    public var questions: [QuestionRecord] = []
    public var knownHandles: [KnownHandleRecord] = []
    public var sessions: [SessionRecord] = []
    /// The highest seq ever appended, per member (also once its events are dropped).
    public var heads: [String: Int64] = [:]
    /// The lowest seq still stored, per member that has any events stored.
    public var firstRetained: [String: Int64] = [:]
    /// Where restores made members' streams jump, in order.
    public var restorePoints: [String: [RestorePoint]] = [:]
    /// The highest question row the store holds or has held: new questions are given rows above it.
    public var lastQuestionRow: Int64 = 0
    /// When the newest stored event was appended: the core never stamps one earlier.
    public var lastEventAt: Timestamp?
    /// Messages for the family hub that it has not stored yet, in order.
    public var hubOutbox: [HubOutbound] = []
    /// The highest id a hub outbox message was ever given: new ones are given ids above it
    /// (the bridge reads the outbox in order of ids, after the last it sent).
    public var lastHubOutbound: Int64 = 0

    public init() {}

    /// The same state with every list in one order, to compare snapshots read different ways.
    public var normalized: StoreSnapshot {
        var s = self
        s.families.sort()
        s.members.sort { $0.id < $1.id }
        s.questions.sort { $0.row < $1.row }
        s.knownHandles.sort { ($0.child, $0.handle) < ($1.child, $1.handle) }
        s.sessions.sort { ($0.member, $0.name) < ($1.member, $1.name) }
        return s
    }

    /// Applies one change to what is live, as a store that keeps every event would.
    public mutating func apply(_ change: Change) {
        switch change {
        case .family(let id):
            if !families.contains(id) { families.append(id) }
        case .member(let m):
            if let i = members.firstIndex(where: { $0.id == m.id }) { members[i] = m } else { members.append(m) }
        case .question(let q):
            questions.removeAll { $0.row == q.row }
            if q.status == .pending {
                questions.append(q)
                questions.sort { $0.row < $1.row }
            }
            lastQuestionRow = max(lastQuestionRow, q.row)
        case .questionState(let q):
            if let i = questions.firstIndex(where: { $0.row == q.row }) {
                questions[i].status = q.status
                questions[i].attempt = q.attempt
                questions[i].outcome = q.outcome
                if q.status != .pending { questions.remove(at: i) }
            }
        case .knownHandle(let k):
            knownHandles.removeAll { $0.child == k.child && $0.handle == k.handle }
            knownHandles.append(k)
        case .unknownHandle(let k):
            knownHandles.removeAll { $0.child == k.child && $0.handle == k.handle }
        case .session(let s):
            sessions.removeAll { $0.member == s.member && $0.name == s.name }
            sessions.append(s)
        case .dropSessions(let member):
            sessions.removeAll { $0.member == member }
        case .dropSession(let member, let name):
            sessions.removeAll { $0.member == member && $0.name == name }
        case .event(let e):
            heads[e.member] = max(heads[e.member] ?? 0, e.seq)
            if firstRetained[e.member] == nil { firstRetained[e.member] = e.seq }
            lastEventAt = max(lastEventAt ?? e.at, e.at)
        case .hubOutbound(let m):
            hubOutbox.append(m)
            lastHubOutbound = max(lastHubOutbound, m.id)
        case .hubSent(let id):
            hubOutbox.removeAll { $0.id == id }
        }
    }
}

/// A stream's jump at a restore: the backup's events end at `through`; the seqs after it up
/// to `head` were given before the restore (or never), and the next event is `head` + 1.
public struct RestorePoint: Sendable, Equatable {
    public var through: Int64
    public var head: Int64

    public init(through: Int64, head: Int64) { (self.through, self.head) = (through, head) }
}
