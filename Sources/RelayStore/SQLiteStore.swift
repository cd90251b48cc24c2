// The durable store: one SQLite database in WAL mode and its journal file. Changes are
// buffered as the core makes them; a commit (once per loop turn) appends them to the
// journal as one compact record — one small sequential write, where a database commit
// would rewrite every page the changes touch. A checkpoint later writes a whole backlog
// of journaled changes into the tables in one transaction, where many turns share
// pages and a question asked and answered in between is written once. Until then the
// backlog is served from memory, and at load the journal is folded into what the
// tables hold. Schema changes are numbered migrations recorded in the database itself.

import RelayProtocol

/// How hard a commit insists on the disk.
public enum SyncMode: String, Sendable, CaseIterable {
    /// WAL with synchronous=NORMAL: survives a killed process.
    case normal
    /// WAL with synchronous=FULL: also survives power loss.
    case full
}

public final class SQLiteStore: RelayStore {
    private let db: SQLiteDatabase
    private let journal: JournalFile
    private let sync: SyncMode
    /// The journal generation the tables already hold.
    private var appliedGeneration: Int64 = 0
    /// This turn's changes, not yet committed.
    private var changes: [Change] = []
    private var turnEvents: [String: [EventRecord]] = [:]
    /// Committed to the journal, not yet written to the tables.
    private var backlog: [Change] = []
    private var backlogEvents: [String: [EventRecord]] = [:]
    /// A commit first checkpoints once the backlog holds this many changes.
    public var checkpointThreshold = 4096

    /// The schema, one step per version. Never edit a step that has shipped; add one.
    static let migrations: [(name: String, sql: String)] = [
        (
            "initial schema",
            """
            CREATE TABLE families(id TEXT PRIMARY KEY) WITHOUT ROWID;
            CREATE TABLE members(id TEXT PRIMARY KEY, family TEXT NOT NULL, role TEXT NOT NULL,
                tokenHash BLOB NOT NULL, removed INTEGER NOT NULL, limitsEnabled INTEGER NOT NULL) WITHOUT ROWID;
            CREATE TABLE questions(id TEXT PRIMARY KEY, child TEXT NOT NULL, family TEXT NOT NULL,
                status TEXT NOT NULL, attempt INTEGER NOT NULL, createdAt INTEGER NOT NULL,
                content TEXT NOT NULL, outcome TEXT) WITHOUT ROWID;
            CREATE TABLE knownHandles(child TEXT NOT NULL, kind TEXT NOT NULL, value TEXT NOT NULL,
                permanent INTEGER NOT NULL, until INTEGER, actions TEXT NOT NULL,
                PRIMARY KEY(child, kind, value)) WITHOUT ROWID;
            CREATE TABLE sessions(member TEXT NOT NULL, name TEXT NOT NULL, cursor INTEGER NOT NULL,
                topics TEXT NOT NULL, PRIMARY KEY(member, name)) WITHOUT ROWID;
            CREATE TABLE events(member TEXT NOT NULL, seq INTEGER NOT NULL, at INTEGER NOT NULL, topic TEXT,
                frame BLOB NOT NULL, PRIMARY KEY(member, seq)) WITHOUT ROWID;
            CREATE INDEX eventsByTime ON events(at);
            CREATE TABLE heads(member TEXT PRIMARY KEY, head INTEGER NOT NULL) WITHOUT ROWID;
            """
        ),
        (
            "journal generation",
            "CREATE TABLE settings(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
        ),
    ]

    /// Opens (creating if needed) the database at `path`, with its journal at
    /// `path-changes`, and brings its schema up to date. `maxPageCount` caps the
    /// database's size, and the journal's at as many 4 KiB pages (tests fill the "disk").
    public init(path: String, sync: SyncMode = .normal, maxPageCount: Int? = nil) throws {
        self.sync = sync
        db = try SQLiteDatabase(path: path)
        journal = try JournalFile(path: path + "-changes", syncEveryAppend: sync == .full, limitBytes: maxPageCount.map { $0 * 4096 })
        try db.exec("PRAGMA busy_timeout = 2000")
        if let maxPageCount { _ = try db.text("PRAGMA max_page_count = \(maxPageCount)") }
        let mode = try db.text("PRAGMA journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw SQLiteError(code: 1, message: "could not switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        try db.exec("PRAGMA synchronous = \(sync == .full ? "FULL" : "NORMAL")")
        // Keep the working set in memory (64 MiB) and checkpoint less often: every commit
        // otherwise re-reads pages and every 1000 pages stalls the loop on a checkpoint.
        try db.exec("PRAGMA cache_size = -65536")
        try db.exec("PRAGMA wal_autocheckpoint = 8192")
        try migrate()
        try readJournal()
    }

    /// The schema version this database is at.
    public func schemaVersion() throws -> Int {
        Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
    }

    private func migrate() throws {
        try db.exec(
            "CREATE TABLE IF NOT EXISTS migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL)"
        )
        let current = Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
        guard current <= Self.migrations.count else {
            throw SQLiteError(
                code: 1,
                message:
                    "the database has schema version \(current), newer than this relay knows (\(Self.migrations.count)); use a newer relay")
        }
        for version in (current + 1)..<(Self.migrations.count + 1) {
            let step = Self.migrations[version - 1]
            try db.transaction {
                try db.exec(step.sql)
                try db.run(
                    "INSERT INTO migrations(version, name, appliedAt) VALUES(?, ?, strftime('%s','now'))",
                    [.int(Int64(version)), .text(step.name)])
            }
        }
    }

    public func load() throws -> StoreSnapshot {
        var s = StoreSnapshot()
        try db.run("SELECT id FROM families ORDER BY id") { r in s.families.append(r.text(0)) }
        try db.run("SELECT id, family, role, tokenHash, removed, limitsEnabled FROM members") { r in
            s.members.append(
                MemberRecord(
                    id: r.text(0), family: r.text(1), role: Role(rawValue: r.text(2)) ?? .child, tokenHash: r.blob(3),
                    removed: r.int(4) != 0, limitsEnabled: r.int(5) != 0))
        }
        try db.run("SELECT child, family, status, attempt, createdAt, content, outcome FROM questions") { r in
            guard let c = QuestionContent(encoded: r.blob(5)),
                let status = QuestionStatus(rawValue: r.text(2))
            else { throw SQLiteError(code: 11, message: "a stored question cannot be read: \(r.text(5).prefix(80))") }
            var outcome: Outcome?
            if !r.isNull(6), let o = try? JSON.parse(r.text(6)), let choice = o["choice"].flatMap(Choice.init(json:)),
                let g = o["guardian"]?.string, let at = o["answeredAt"]?.int
            {
                outcome = Outcome(choice: choice, guardian: g, answeredAt: Timestamp(milliseconds: at))
            }
            s.questions.append(
                QuestionRecord(
                    content: c, child: r.text(0), family: r.text(1), status: status, attempt: r.int(3),
                    createdAt: Timestamp(milliseconds: r.int(4)), outcome: outcome))
        }
        try db.run("SELECT child, kind, value, permanent, until, actions FROM knownHandles") { r in
            guard let kind = HandleKind(rawValue: r.text(1)) else { return }
            let actions = (try? JSON.parse(r.text(5)))?.array?.compactMap(\.string) ?? []
            s.knownHandles.append(
                KnownHandleRecord(
                    child: r.text(0), handle: NormalizedHandle(kind: kind, value: r.text(2)), permanent: r.int(3) != 0,
                    until: r.isNull(4) ? nil : Timestamp(milliseconds: r.int(4)), actions: actions))
        }
        try db.run("SELECT member, name, cursor, topics FROM sessions") { r in
            let topics = Set(r.text(3).split(separator: ",").compactMap { TopicKind(rawValue: String($0)) })
            s.sessions.append(SessionRecord(member: r.text(0), name: r.text(1), cursor: r.int(2), topics: topics))
        }
        try db.run("SELECT member, head FROM heads") { r in s.heads[r.text(0)] = r.int(1) }
        // One index lookup per member: a GROUP BY over the events would read them all.
        for m in s.members {
            if let top = try db.scalar("SELECT max(seq) FROM events WHERE member = ?", [.text(m.id)]) {
                s.heads[m.id] = max(s.heads[m.id] ?? 0, top)
            }
        }
        try readJournal()
        s.apply(backlog)
        return s
    }

    /// Takes the journal's records the tables do not hold yet as the backlog.
    private func readJournal() throws {
        discardChanges()
        backlog.removeAll()
        backlogEvents.removeAll()
        appliedGeneration = try db.scalar("SELECT value FROM settings WHERE key = 'journalGeneration'") ?? 0
        for record in try journal.readRecords(appliedGeneration: appliedGeneration) {
            backlog.append(contentsOf: try Change.decode(record))
        }
        for case .event(let e) in backlog { backlogEvents[e.member, default: []].append(e) }
    }

    public func saveFamily(_ id: String) { changes.append(.family(id)) }
    public func saveMember(_ member: MemberRecord) { changes.append(.member(member)) }
    public func saveQuestion(_ question: QuestionRecord) { changes.append(.question(question)) }
    public func saveQuestionState(_ question: QuestionRecord) { changes.append(.questionState(QuestionState(question))) }
    public func deleteQuestion(id: String) { changes.append(.forgetQuestion(id)) }
    public func saveKnownHandle(_ known: KnownHandleRecord) { changes.append(.known(known)) }
    public func deleteKnownHandle(child: String, handle: NormalizedHandle) { changes.append(.unknown(child, handle)) }
    public func saveSession(_ session: SessionRecord) { changes.append(.session(session)) }
    public func deleteSessions(member: String) { changes.append(.dropSessions(member)) }
    public func appendEvent(_ event: EventRecord) {
        changes.append(.event(event))
        turnEvents[event.member, default: []].append(event)
    }

    public var hasChanges: Bool { !changes.isEmpty }

    public func events(member: String, after seq: Int64, limit: Int) throws -> [EventRecord] {
        var out: [EventRecord] = []
        try db.run(
            "SELECT seq, at, topic, frame FROM events WHERE member = ? AND seq > ? ORDER BY seq LIMIT ?",
            [.text(member), .int(seq), .int(Int64(limit))]
        ) { r in
            out.append(
                EventRecord(
                    member: member, seq: r.int(0), at: Timestamp(milliseconds: r.int(1)),
                    topic: r.isNull(2) ? nil : TopicKind(rawValue: r.text(2)), frame: r.blob(3)))
        }
        for pending in [backlogEvents[member], turnEvents[member]] {
            guard out.count < limit, let pending else { continue }
            let last = out.last?.seq ?? seq
            out.append(contentsOf: pending.lazy.filter { $0.seq > last }.prefix(limit - out.count))
        }
        return out
    }

    public func oldestEventSeq(member: String) throws -> Int64? {
        let stored = try db.scalar("SELECT min(seq) FROM events WHERE member = ?", [.text(member)])
        return stored ?? backlogEvents[member]?.first?.seq ?? turnEvents[member]?.first?.seq
    }

    public func commit() throws {
        guard !changes.isEmpty else { return }
        defer { discardChanges() }
        if backlog.count >= checkpointThreshold { try checkpoint() }
        try startJournalOverIfApplied()
        try journal.append(Change.encode(changes))
        backlog.append(contentsOf: changes)
        for (member, events) in turnEvents { backlogEvents[member, default: []].append(contentsOf: events) }
    }

    public func discardChanges() {
        changes.removeAll(keepingCapacity: true)
        turnEvents.removeAll(keepingCapacity: true)
    }

    public func checkpoint() throws {
        if !backlog.isEmpty {
            let generation = journal.generation
            // The journal is emptied after this, so this transaction must reach the disk
            // even where commits otherwise need not (synchronous=NORMAL).
            if sync == .normal { try db.exec("PRAGMA synchronous = FULL") }
            defer { if sync == .normal { try? db.exec("PRAGMA synchronous = NORMAL") } }
            try db.transaction {
                for change in backlog.foldingQuestions() { try write(change) }
                try db.run(
                    "INSERT OR REPLACE INTO settings(key, value) VALUES('journalGeneration', ?)", [.int(generation)])
            }
            appliedGeneration = generation
            backlog.removeAll(keepingCapacity: true)
            backlogEvents.removeAll(keepingCapacity: true)
        }
        try startJournalOverIfApplied()
    }

    /// Once the tables hold the journal's generation, the journal starts the next one.
    private func startJournalOverIfApplied() throws {
        if journal.generation <= appliedGeneration { try journal.startOver(generation: appliedGeneration + 1) }
    }

    private func write(_ change: Change) throws {
        switch change {
        case .family(let id):
            try db.run("INSERT OR IGNORE INTO families(id) VALUES(?)", [.text(id)])
        case .member(let m):
            try db.run(
                "INSERT OR REPLACE INTO members(id, family, role, tokenHash, removed, limitsEnabled) VALUES(?,?,?,?,?,?)",
                [
                    .text(m.id), .text(m.family), .text(m.role.rawValue), .blob(m.tokenHash), .int(m.removed ? 1 : 0),
                    .int(m.limitsEnabled ? 1 : 0),
                ])
        case .question(let q):
            try db.run(
                "INSERT OR REPLACE INTO questions(id, child, family, status, attempt, createdAt, content, outcome) VALUES(?,?,?,?,?,?,?,?)",
                [
                    .text(q.id), .text(q.child), .text(q.family), .text(q.status.rawValue), .int(q.attempt),
                    .int(q.createdAt.milliseconds), .text(String(decoding: q.content.encoded, as: UTF8.self)), Self.outcome(q.outcome),
                ])
        case .forgetQuestion(let id):
            try db.run("DELETE FROM questions WHERE id = ?", [.text(id)])
        case .questionState(let q):
            try db.run(
                "UPDATE questions SET status = ?, attempt = ?, outcome = ? WHERE id = ?",
                [.text(q.status.rawValue), .int(q.attempt), Self.outcome(q.outcome), .text(q.id)])
        case .known(let k):
            try db.run(
                "INSERT OR REPLACE INTO knownHandles(child, kind, value, permanent, until, actions) VALUES(?,?,?,?,?,?)",
                [
                    .text(k.child), .text(k.handle.kind.rawValue), .text(k.handle.value), .int(k.permanent ? 1 : 0),
                    k.until.map { .int($0.milliseconds) } ?? .null, .text(JSON.array(k.actions.map { .string($0) }).text),
                ])
        case .unknown(let child, let h):
            try db.run(
                "DELETE FROM knownHandles WHERE child = ? AND kind = ? AND value = ?",
                [.text(child), .text(h.kind.rawValue), .text(h.value)])
        case .session(let s):
            try db.run(
                "INSERT OR REPLACE INTO sessions(member, name, cursor, topics) VALUES(?,?,?,?)",
                [.text(s.member), .text(s.name), .int(s.cursor), .text(s.topics.map(\.rawValue).sorted().joined(separator: ","))])
        case .dropSessions(let member):
            try db.run("DELETE FROM sessions WHERE member = ?", [.text(member)])
        case .event(let e):
            try db.run(
                "INSERT INTO events(member, seq, at, topic, frame) VALUES(?,?,?,?,?)",
                [.text(e.member), .int(e.seq), .int(e.at.milliseconds), e.topic.map { .text($0.rawValue) } ?? .null, .blob(e.frame)])
        }
    }

    private static func outcome(_ outcome: Outcome?) -> SQLValue {
        guard let o = outcome else { return .null }
        let j: JSON = .object([
            "choice": o.choice.json, "guardian": .string(o.guardian), "answeredAt": .int(o.answeredAt.milliseconds),
        ])
        return .text(j.text)
    }

    public func pruneEvents(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int {
        try checkpoint()  // the backlog's events are pruned like the others
        var dropped = 0
        try db.transaction {
            // Heads are kept apart from the events so a stream's seq never repeats once its events are gone.
            try db.run(
                """
                INSERT OR REPLACE INTO heads(member, head)
                SELECT member, max(seq) FROM events
                WHERE member IN (SELECT DISTINCT member FROM events WHERE at < ?) GROUP BY member
                """, [.int(cutoff.milliseconds)])
            for member in upTo.keys {
                try db.run(
                    "INSERT OR REPLACE INTO heads(member, head) SELECT member, max(seq) FROM events WHERE member = ? GROUP BY member",
                    [.text(member)])
            }
            try db.run("DELETE FROM events WHERE at < ?", [.int(cutoff.milliseconds)])
            dropped += db.changes
            for (member, seq) in upTo where seq > 0 {
                try db.run("DELETE FROM events WHERE member = ? AND seq <= ?", [.text(member), .int(seq)])
                dropped += db.changes
            }
        }
        return dropped
    }
}
