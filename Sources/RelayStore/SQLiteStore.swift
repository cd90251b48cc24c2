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
    let db: SQLiteDatabase
    private let journal: JournalFile
    private let sync: SyncMode
    /// The journal generation the tables already hold.
    private var appliedGeneration: Int64 = 0
    /// This turn's changes, not yet committed.
    private var changes: [Change] = []
    var turnEvents: [String: [EventRecord]] = [:]
    /// Committed to the journal, not yet written to the tables.
    private var backlog: [Change] = []
    var backlogEvents: [String: [EventRecord]] = [:]
    /// A commit first checkpoints once the backlog holds this many changes.
    public var checkpointThreshold = 4096
    /// Each stored question's row key: rows are keyed in order of asking, so writing
    /// new questions touches the table's last pages rather than one random page each.
    private var questionKeys: [String: Int64] = [:]
    private var lastQuestionKey: Int64 = 0

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
                try step.convert?(db)
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
        questionKeys.removeAll()
        try db.run("SELECT child, family, status, attempt, createdAt, content, outcome, key FROM questions ORDER BY key") { r in
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
            self.questionKeys[c.id] = r.int(7)
            self.lastQuestionKey = max(self.lastQuestionKey, r.int(7))
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
            if let top = try db.scalar("SELECT max(lastSeq) FROM eventBatches WHERE member = ?", [.text(m.id)]) {
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
            var forgotten: [String] = []
            try db.transaction {
                for change in backlog.foldingQuestions() {
                    if case .forgetQuestion(let id) = change { forgotten.append(id) }
                    try write(change)
                }
                for (member, events) in backlogEvents { try insertBatch(member: member, events) }
                try db.run(
                    "INSERT OR REPLACE INTO settings(key, value) VALUES('journalGeneration', ?)", [.int(generation)])
            }
            for id in forgotten { questionKeys[id] = nil }  // only once their rows are surely gone
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
            let key =
                questionKeys[q.id]
                ?? {
                    lastQuestionKey += 1
                    questionKeys[q.id] = lastQuestionKey
                    return lastQuestionKey
                }()
            try db.run(
                "INSERT OR REPLACE INTO questions(key, id, child, family, status, attempt, createdAt, content, outcome) VALUES(?,?,?,?,?,?,?,?,?)",
                [
                    .int(key), .text(q.id), .text(q.child), .text(q.family), .text(q.status.rawValue), .int(q.attempt),
                    .int(q.createdAt.milliseconds), .text(String(decoding: q.content.encoded, as: UTF8.self)), Self.outcome(q.outcome),
                ])
        case .forgetQuestion(let id):
            guard let key = questionKeys[id] else { return }
            try db.run("DELETE FROM questions WHERE key = ?", [.int(key)])
        case .questionState(let q):
            guard let key = questionKeys[q.id] else { return }
            try db.run(
                "UPDATE questions SET status = ?, attempt = ?, outcome = ? WHERE key = ?",
                [.text(q.status.rawValue), .int(q.attempt), Self.outcome(q.outcome), .int(key)])
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
        case .event:
            break  // written per member in batches
        }
    }

    private static func outcome(_ outcome: Outcome?) -> SQLValue {
        guard let o = outcome else { return .null }
        let j: JSON = .object([
            "choice": o.choice.json, "guardian": .string(o.guardian), "answeredAt": .int(o.answeredAt.milliseconds),
        ])
        return .text(j.text)
    }
}
