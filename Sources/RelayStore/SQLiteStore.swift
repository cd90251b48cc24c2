// The durable store: one SQLite database in WAL mode, and nothing else on disk. A loop
// turn's changes are written in one transaction (group commit); SQLite's WAL makes
// that a sequential append, and its checkpoints move the pages into place. Schema
// changes are numbered migrations recorded in the database itself (SQLiteSchema.swift);
// what relays before this one kept in journals beside it is folded in once
// (SQLiteStore+Upgrade.swift).

import CSQLite
import Foundation
import Glibc
import RelayModel
import RelayProtocol
import Synchronization

/// How hard a commit insists on the disk.
public enum SyncMode: String, Sendable, CaseIterable {
    /// WAL with synchronous=NORMAL: survives a killed process.
    case normal
    /// WAL with synchronous=FULL: also survives power loss.
    case full
}

/// Why a store cannot be opened, in words that say what to do.
public struct StoreError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// One connection writes (`commit`, `prune`, `checkpoint`), on the store's writer thread;
/// another reads (`load`, `events`), on the loop's: WAL lets each see the last commit
/// while the next is written. Each connection is only ever used by one thread at a time.
/// The WAL is checkpointed by a thread and connection of its own (`WALCheckpointer`).
public final class SQLiteStore: RelayStore, @unchecked Sendable {
    let db: SQLiteDatabase
    let reader: SQLiteDatabase
    public let path: String
    /// The rows outside the events index, and each stream's newest seq (see `EventTail`).
    let tail = Mutex(EventTail())
    /// Where pruning stands among the rows outside the index: the writer's thread's alone.
    var eventScan = EventScan(examinedThrough: 0)
    /// A round adds the rows waiting to the index once there are this many: the more, the
    /// more entries of each member share a page (and the more rows are listed in memory,
    /// and read at start).
    var eventIndexRoundRows = 32_768
    /// The build's `secure_delete` (Debian's: on), which every change but pruning keeps.
    let secureDelete: String
    /// The questions not in the lookup tables yet (see SQLiteStore+Questions.swift).
    let questionTail = Mutex(QuestionTail())
    /// Which question ids may be stored (StoredQuestionIDs.swift): filled at each commit,
    /// and with what was stored before by a thread of its own, which ends with the store.
    let storedIDs: StoredIDsScan
    /// Checkpoints the WAL beside the writer (WALCheckpointer.swift).
    let checkpointer: WALCheckpointer
    // The upkeep of the questions' lookup tables under way, the writer's thread's alone:
    // an indexing pass; a forgetting pass's rows and how many are deleted; and where the
    // sweeps of the lookup by id and of the list of pending questions stopped.
    var indexPass: QuestionIndexPass?
    var forgetPass: [Int64]?
    var forgotten = 0
    var sweptThrough: (Int64, Int64)?
    var pendingSweptThrough: Int64 = 0
    /// How long a question stays listed in memory, at most, before a pass adds it to the
    /// lookup tables (given a pruning pass to run it).
    let questionIndexSeconds: Double

    /// Opens (creating if needed) the database at `path` and brings its schema up to date;
    /// journals left by relays before this one are folded in and removed. `maxPageCount`
    /// caps the database's size at as many pages (tests fill the "disk" with it).
    /// `questionIndexSeconds`: see the property.
    public init(path: String, sync: SyncMode = .normal, maxPageCount: Int? = nil, questionIndexSeconds: Double = 10) throws {
        self.path = path
        self.questionIndexSeconds = questionIndexSeconds
        if let loss = Self.lossBeforeOpening(path) { throw StoreError(loss) }
        // A new store that cannot be set up (a full disk, say) goes again: left, its empty
        // first page would have the next start take it for a store that lost its WAL.
        var st = stat()
        let making = stat(path, &st) != 0 || st.st_size == 0
        var madeWhole = false
        defer { if making && !madeWhole { for suffix in ["", "-wal", "-shm"] { unlink(path + suffix) } } }
        db = try SQLiteDatabase(path: path)
        // Served read-only, every change would fail: refused here, with what to do.
        guard !db.isReadOnly else {
            throw StoreError("\(path) is read-only to this user: make it the relay user's and writable (chmod 600 \(path))")
        }
        try db.exec("PRAGMA busy_timeout = 5000")
        if let maxPageCount { _ = try db.text("PRAGMA max_page_count = \(maxPageCount)") }
        let mode = try db.text("PRAGMA journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw StoreError("could not switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        try db.exec("PRAGMA synchronous = \(sync == .full ? "FULL" : "NORMAL")")
        // The WAL is reused from its start after each checkpoint; past 288 MiB it is also cut
        // back, so a burst does not keep its size on disk. Under steady writing it reaches
        // `WALCheckpointer.hardLimitPages` frames of a 4 KiB page and a 24-byte header
        // (257.5 MiB) and the commits that pass them: kept, as it would only grow again.
        try db.exec("PRAGMA journal_size_limit = \(288 << 20)")
        // The writer touches the newest pages of each table, and the kernel caches the rest:
        // a bigger page cache than SQLite's default only holds memory (see performance.md).
        try db.exec("PRAGMA cache_size = -2048")
        secureDelete = try db.text("PRAGMA secure_delete") ?? "0"
        try Self.migrate(db)
        madeWhole = true
        checkpointer = try WALCheckpointer(path: path)
        storedIDs = StoredIDsScan(path: path)
        reader = try SQLiteDatabase(path: path)
        try reader.exec("PRAGMA busy_timeout = 5000")
        try loadTail()  // the fold reads the streams' heads
        if try foldLegacyJournals(sync: sync) { try loadTail() }
        try loadQuestionTail()
        storedIDs.build(
            expected: try storedQuestionCount(),
            listed: questionTail.withLock { $0.entries.map(\.id) })
        // The WAL file now exists; with full sync its directory entry is made durable too.
        if sync == .full { try Self.syncDirectory(of: path) }
        // Last: a store that fails to open leaves no thread behind (no deinit runs then).
        // Until now SQLite checkpointed in the commits, as it does by default.
        let checkpointer = checkpointer
        db.setWALHook(checkpointer.committed(walPages:), checkpointed: checkpointer.writerCheckpointed(through:))
        checkpointer.start()
    }

    deinit {
        storedIDs.cancel()
        checkpointer.stop()
    }

    /// Moves everything the WAL holds into the database file and empties the WAL.
    public func checkpoint() throws {
        _ = try checkpointer.whileIdle { try db.checkpoint(mode: SQLITE_CHECKPOINT_TRUNCATE) }
    }

    /// How many questions are stored, as the tally says.
    func storedQuestionCount() throws -> Int { Int(try db.scalar("SELECT sum(count) FROM questionTally") ?? 0) }

    /// The schema version this database is at.
    public func schemaVersion() throws -> Int {
        Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
    }

    /// What a store at `path` has lost that SQLite would not say, or would hide once it
    /// opens the files (each check and backup, too, asks first): nil when nothing is.
    static func lossBeforeOpening(_ path: String) -> String? {
        emptiedDatabase(path) ?? WALWitness.loss(at: path) ?? schemaLost(path)
    }

    /// A `relay.db` whose own first page lists no table, with no WAL beside it to hold any:
    /// SQLite writes that page when a new store takes WAL mode, and the relay's schema and
    /// everything after it go to the WAL until a checkpoint copies them. Its WAL (and the
    /// index, which `WALWitness` would have read) are gone, and everything with them.
    private static func schemaLost(_ path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 105)
        guard read(fd, &header, header.count) == header.count, header.starts(with: Array("SQLite format 3\0".utf8)) else {
            return nil  // none, or not SQLite's: SQLite says so
        }
        // The first page's B-tree header, after the file's 100 bytes: a leaf (13) of no cells.
        guard header[100] == 13, header[103] == 0, header[104] == 0 else { return nil }
        guard !walHasFrames(path) else { return nil }  // the schema may be there
        return "\(path) holds no tables and no WAL is beside it: the WAL (\(path)-wal), which held the whole store, was"
            + " lost. Restore a backup (permission-relay restore), or move the directory aside to start with an empty store"
    }

    /// An empty or missing `relay.db` beside files only a used store has (a WAL with frames:
    /// SQLite writes a database's first page into the file itself before its WAL has any,
    /// and deletes a WAL beside an empty one; a WAL index that gives the database pages, as
    /// one left by a clean stop does beside an empty WAL; or an older relay's journal) is a
    /// store that lost its database, not a new one: starting afresh would make every member
    /// unknown.
    private static func emptiedDatabase(_ path: String) -> String? {
        var st = stat()
        let size = stat(path, &st) == 0 ? Int(st.st_size) : -1
        guard size <= 0 else { return nil }
        var leftovers =
            (walHasFrames(path) ? [path + "-wal"] : [])
            + ["-changes.0", "-changes.1"].map { path + $0 }.filter {
                access($0, F_OK) == 0
            }
        if leftovers.isEmpty, let index = WALWitness.Index(path + "-shm"), index.pages > 0 {
            leftovers.append("\(path)-shm (the index of a database of \(index.pages) pages)")
        }
        guard !leftovers.isEmpty else { return nil }
        let are = leftovers.count == 1 ? "is" : "are"
        return "\(path) is \(size < 0 ? "missing" : "empty") but \(leftovers.joined(separator: " and ")) \(are) left of a"
            + " store that held data: the database was lost. Restore it from a backup (permission-relay restore), or move"
            + " the directory aside to start with an empty store"
    }

    /// Whether the WAL beside the database at `path` holds more than its 32-byte header.
    private static func walHasFrames(_ path: String) -> Bool {
        var st = stat()
        return stat(path + "-wal", &st) == 0 && st.st_size > 32
    }

    static func migrate(_ db: SQLiteDatabase) throws {
        try db.exec(
            "CREATE TABLE IF NOT EXISTS migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL)"
        )
        let current = Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
        guard current <= migrations.count else {
            throw StoreError(
                "the database has schema version \(current), newer than this relay knows (\(migrations.count)); use a newer relay")
        }
        for version in (current + 1)..<(migrations.count + 1) {
            let step = migrations[version - 1]
            try db.transaction {
                try db.exec(step.sql)
                try step.convert?(db)
                try db.run(
                    "INSERT INTO migrations(version, name, appliedAt) VALUES(?, ?, strftime('%s','now'))",
                    [.int(Int64(version)), .text(step.name)])
            }
        }
    }

    // MARK: - Reading

    public func load() throws -> StoreSnapshot { try load(allQuestions: false) }

    /// What `load` reads, with every stored question when `allQuestions` (the fold of
    /// journals rewrites them all).
    func load(allQuestions: Bool) throws -> StoreSnapshot {
        // One snapshot of every table, whatever the writer commits meanwhile.
        try reader.exec("BEGIN")
        defer { try? reader.exec("COMMIT") }
        var s = try Self.readRecords(from: reader, allQuestions: allQuestions)
        // Each stream's oldest event: through the index where it has indexed rows, else
        // its oldest row listed in memory.
        let t = tail.withLock { $0 }
        for (member, head) in t.stored { s.heads[member] = max(s.heads[member] ?? 0, head) }
        for member in t.pinned.keys {
            s.firstRetained[member] = try reader.scalar(
                "SELECT e.firstSeq FROM eventIndex i JOIN events e ON e.id = i.id AND e.member = i.member WHERE i.member = ? ORDER BY i.lastSeq LIMIT 1",
                [.text(member)])
        }
        for (member, rows) in t.rows where s.firstRetained[member] == nil { s.firstRetained[member] = rows.first?.first }
        s.hubOutbox = try Self.hubOutbox(after: 0, limit: .max, in: reader)
        s.lastHubOutbound = try reader.scalar("SELECT value FROM settings WHERE key = 'lastHubOutbound'") ?? 0
        // Rows are in order of appending, and so of time.
        s.lastEventAt = try reader.scalar("SELECT at FROM events ORDER BY id DESC LIMIT 1").map(Timestamp.init(milliseconds:))
        return s
    }

    /// The records a start reads (families, members, the live questions, known handles,
    /// sessions, stream heads), as it reads them: a row it cannot read throws, and the start
    /// refuses the store; `check` reads them the same way.
    static func readRecords(from db: SQLiteDatabase, allQuestions: Bool) throws -> StoreSnapshot {
        var s = StoreSnapshot()
        try db.run("SELECT id FROM families ORDER BY id") { r in s.families.append(r.text(0)) }
        try db.run("SELECT member, through, head FROM restorePoints ORDER BY member, through") { r in
            s.restorePoints[r.text(0), default: []].append(RestorePoint(through: r.int(1), head: r.int(2)))
        }
        // A NULL where the schema allows none is damage on disk, never read as "" or 0.
        try db.run("SELECT id, family, role, tokenHash, removed, limitsEnabled, unixUID FROM members") { r in
            guard let role = Role(rawValue: r.text(2)), !r.anyNull(0...5) else { throw Self.unreadable("member", r.text(0)) }
            s.members.append(
                MemberRecord(
                    id: r.text(0), family: r.text(1), role: role, tokenHash: r.blob(3), removed: r.int(4) != 0,
                    limitsEnabled: r.int(5) != 0, unixUID: r.isNull(6) ? nil : UInt32(truncatingIfNeeded: r.int(6))))
        }
        // Only what is live: the finished questions are read back when a request needs them.
        let read: (sql: String, args: [SQLValue]) =
            allQuestions
            ? ("SELECT \(Self.questionColumns) FROM questions q \(Self.withState) ORDER BY q.key", [])
            : (Self.pending, [.int(try db.scalar("SELECT value FROM settings WHERE key = 'questionsIndexedThrough'") ?? 0)])
        try db.run(dynamic: read.sql, read.args) { s.questions.append(try Self.question(from: $0)) }
        s.lastQuestionRow = max(
            try db.scalar("SELECT max(key) FROM questions") ?? 0,
            try db.scalar("SELECT value FROM settings WHERE key = 'lastQuestionRow'") ?? 0)
        try db.run("SELECT row, child, kind, value, permanent, until, actions FROM knownHandles") { r in
            guard let kind = HandleKind(rawValue: r.text(2)), let actions = (try? JSON.parse(r.text(6)))?.array, !r.anyNull(0...4)
            else {
                throw Self.unreadable("known handle of", r.text(1))
            }
            s.knownHandles.append(
                KnownHandleRecord(
                    row: r.int(0), child: r.text(1), handle: NormalizedHandle(kind: kind, value: r.text(3)),
                    permanent: r.int(4) != 0, until: r.isNull(5) ? nil : Timestamp(milliseconds: r.int(5)),
                    actions: actions.compactMap(\.string)))
        }
        try db.run("SELECT member, name, cursor, topics, acknowledged FROM sessions") { r in
            guard !r.anyNull(0...3) else { throw Self.unreadable("session of", r.text(0)) }
            s.sessions.append(
                SessionRecord(
                    member: r.text(0), name: r.text(1), cursor: r.int(2), acknowledged: r.isNull(4) ? nil : r.int(4),
                    topics: Self.topics(r.text(3))))
        }
        try db.run("SELECT member, head FROM heads") { r in
            guard !r.anyNull(0...1) else { throw Self.unreadable("stream head of", r.text(0)) }
            s.heads[r.text(0)] = r.int(1)
        }
        return s
    }

    /// The pending questions, in order of rows: those the list holds up to the lookup
    /// tables' mark (`?1`), and those above it; and any whose status is damaged, which
    /// `question(from:)` refuses. (CROSS JOIN: the list is read, and each
    /// question it names; SQLite would otherwise read every question up to the mark.)
    private static let pending = """
        SELECT \(questionColumns) FROM pendingQuestions p CROSS JOIN questions q ON q.key = p.key \(withState)
            WHERE p.key <= ?1 AND \(notFinished)
        UNION ALL
        SELECT \(questionColumns) FROM questions q \(withState) WHERE q.key > ?1 AND \(notFinished)
        ORDER BY 8
        """  // the key: the last of `questionColumns`

    /// The hub outbox's messages after `id`, in order.
    static func hubOutbox(after id: Int64, limit: Int, in db: SQLiteDatabase) throws -> [HubOutbound] {
        var out: [HubOutbound] = []
        try db.run(
            "SELECT id, family, subject, messageID, body, firstOnSubject FROM hubOutbox WHERE id > ? ORDER BY id LIMIT ?",
            [.int(id), .int(Int64(min(limit, Int(Int64.max))))]
        ) { r in
            out.append(
                HubOutbound(
                    id: r.int(0), family: r.text(1), subject: r.text(2), messageID: r.text(3), body: r.blob(4),
                    firstOnSubject: r.int(5) != 0))
        }
        return out
    }

    /// A connection of its own for the hub's bridge to read the outbox from, on its thread.
    public func hubOutboxReader() throws -> HubOutboxReader { try HubOutboxReader(path: path) }

    static func topics(_ stored: String) -> Set<TopicKind> {
        Set(stored.split(separator: ",").compactMap { TopicKind(rawValue: String($0)) })
    }

    /// `which` is quoted from the damaged row: its control characters are written escaped,
    /// so that a terminal or log shows them rather than acts on them.
    static func unreadable(_ what: String, _ which: String) -> SQLiteError {
        let shown = which.unicodeScalars.map { $0.properties.generalCategory == .control ? $0.escaped(asASCII: true) : String($0) }
        return SQLiteError(code: 11, message: "a stored \(what) \(shown.joined()) cannot be read")  // SQLITE_CORRUPT: the data is damaged
    }

    // MARK: - Writing

    public func commit(_ changes: [Change]) throws {
        guard !changes.isEmpty else { return }
        var written = Written()
        try db.transaction { written = try commitInTransaction(changes) }
        questionTail.withLock { t in
            for q in written.questions { t.note(q) }
        }
        // Before the core lets go of a question it has just stored (once this returns).
        // (A count that cannot be read leaves the filter as it is, for the next commit to
        // try again: taken for 0, the build would read nothing and miss every id not listed.)
        if storedIDs.insert(written.questions.lazy.map(\.id)), let expected = try? storedQuestionCount() {
            // On the writer's thread, between commits and passes: what is listed now is
            // handed over, what is committed from now on goes into both, the rest is read.
            storedIDs.build(expected: expected, listed: questionTail.withLock { $0.entries.map(\.id) })
        }
        guard !written.rows.isEmpty else { return }
        tail.withLock { t in
            for (member, row) in written.rows { t.append(member, row) }
        }
    }

    public func finishCommits() {
        db.checkpointIfDue()
    }

    /// What a commit wrote that is listed in memory once it is committed: the event rows it
    /// appended (`EventTail`) and the questions it stored (`QuestionTail`).
    struct Written {
        var rows: [(member: String, row: EventTail.Row)] = []
        var questions: [QuestionTail.Entry] = []
    }

    /// Writes `changes`, in one pass over them.
    @discardableResult
    func commitInTransaction(_ changes: [Change]) throws -> Written {
        var events: [EventRecord] = []
        var written = Written()
        // Once a commit, not a question.
        let (questionsMark, passedThrough) = questionTail.withLock { ($0.indexedThrough, $0.passedThrough) }
        // Pending again (asked anew, or a newer asking from the hub) in a row a pass may have
        // found finished: listed here (see the schema), as the pass will not list it.
        func listIfPendingAgain(_ q: QuestionRecord) throws {
            guard q.status == .pending && q.row <= passedThrough else { return }
            try db.run("INSERT OR IGNORE INTO pendingQuestions(key) VALUES(?)", [.int(q.row)])
        }
        for c in changes {
            switch c {
            case .event(let e): events.append(e)
            case .question(let q):
                try write(q, questionsMark: questionsMark)
                try listIfPendingAgain(q)
                written.questions.append(.init(row: q.row, id: q.key, child: q.child, createdAt: q.createdAt.milliseconds))
            case .questionState(let q):
                try write(c)
                try listIfPendingAgain(q)
            default: try write(c)
            }
        }
        let (stored, next) = tail.withLock { ($0.stored, $0.nextRow) }
        written.rows = try Self.insert(events, into: db, firstID: next) { stored[$0] ?? 0 }
        return written
    }

    /// Writes one change other than a question or an event.
    private func write(_ change: Change) throws {
        switch change {
        case .family(let id):
            try db.run("INSERT OR IGNORE INTO families(id) VALUES(?)", [.text(id)])
        case .member(let m):
            try db.run(
                "INSERT OR REPLACE INTO members(id, family, role, tokenHash, removed, limitsEnabled, unixUID) VALUES(?,?,?,?,?,?,?)",
                [
                    .text(m.id), .text(m.family), .text(m.role.rawValue), .blob(m.tokenHash), .int(m.removed ? 1 : 0),
                    .int(m.limitsEnabled ? 1 : 0), m.unixUID.map { .int(Int64($0)) } ?? .null,
                ])
        case .questionState(let q):
            // A row of its own (schema): the question's row, and its page, stay as they are.
            try db.run(
                """
                INSERT OR REPLACE INTO questionStates(key, status, attempt, outcome)
                    SELECT ?1, ?2, ?3, ?4 WHERE EXISTS (SELECT 1 FROM questions WHERE key = ?1)
                """,
                [.int(q.row), .text(q.status.rawValue), .int(q.attempt), Self.stored(q.outcome)])
        case .knownHandle(let k):
            try db.run(
                "INSERT OR REPLACE INTO knownHandles(row, child, kind, value, permanent, until, actions) VALUES(?,?,?,?,?,?,?)",
                [
                    .int(k.row), .text(k.child), .text(k.handle.kind.rawValue), .text(k.handle.value), .int(k.permanent ? 1 : 0),
                    k.until.map { .int($0.milliseconds) } ?? .null, .text(JSON.array(k.actions.map { .string($0) }).text),
                ])
        case .unknownHandle(let k):
            try db.run("DELETE FROM knownHandles WHERE row = ?", [.int(k.row)])
        case .session(let s):
            try db.run(
                "INSERT OR REPLACE INTO sessions(member, name, cursor, topics, acknowledged) VALUES(?,?,?,?,?)",
                [
                    .text(s.member), .text(s.name), .int(s.cursor), .text(s.topics.map(\.rawValue).sorted().joined(separator: ",")),
                    s.acknowledged == s.cursor ? .null : .int(s.acknowledged),
                ])
        case .dropSessions(let member):
            try db.run("DELETE FROM sessions WHERE member = ?", [.text(member)])
        case .dropSession(let member, let name):
            try db.run("DELETE FROM sessions WHERE member = ? AND name = ?", [.text(member), .text(name)])
        case .hubOutbound(let m):
            try db.run(
                "INSERT INTO hubOutbox(id, family, subject, messageID, body, firstOnSubject) VALUES(?,?,?,?,?,?)",
                [.int(m.id), .text(m.family), .text(m.subject), .text(m.messageID), .blob(m.body), .int(m.firstOnSubject ? 1 : 0)])
            try db.run(
                "INSERT INTO settings(key, value) VALUES('lastHubOutbound', ?) ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
                [.int(m.id)])
        case .hubSent(let id):
            try db.run("DELETE FROM hubOutbox WHERE id = ?", [.int(id)])
        case .question, .event:
            preconditionFailure("questions and events are written by commitInTransaction")
        }
    }

    /// Writes a question asked (or asked again); `questionsMark` is the lookup tables' mark
    /// (`QuestionTail`).
    private func write(_ q: QuestionRecord, questionsMark: Int64) throws {
        // An upsert, not a replace: the tally's triggers see an update as one, and the
        // state's row goes with it. (Rows of older versions may keep room for an outcome.)
        try db.run(
            """
            INSERT INTO questions(key, id, child, family, status, attempt, createdAt, content, outcome)
                VALUES(?,?,?,?,?,?,?,?,?)
            ON CONFLICT(key) DO UPDATE SET id = excluded.id, child = excluded.child, family = excluded.family,
                status = excluded.status, attempt = excluded.attempt, createdAt = excluded.createdAt,
                content = excluded.content, outcome = excluded.outcome, reserved = NULL
            """,
            [
                .int(q.row), .text(q.id), .text(q.child), .text(q.family), .text(q.status.rawValue), .int(q.attempt),
                .int(q.createdAt.milliseconds), .utf8(q.content.encoded), Self.stored(q.outcome),
            ])
        // A row at or below the mark is not listed for a pass: it is found by the lookup
        // tables, which may have lost it if a forgetting step deleted it before this
        // commit stored it again (asked again: rare, so written each time).
        if q.row <= questionsMark {
            let id = Self.idColumns(q.key)
            try db.run(
                "INSERT OR IGNORE INTO questionPlaces(child, createdAt, key) VALUES(?, ?, ?)",
                [.text(q.child), .int(q.createdAt.milliseconds), .int(q.row)])
            try db.run(
                "INSERT OR REPLACE INTO questionIDs(high, low, key) VALUES(?, ?, ?)", [.int(id.high), .int(id.low), .int(q.row)])
        }
    }

    /// Keeps `row` known as given: rows are never given twice, also once their question is gone.
    func noteQuestionRow(_ row: Int64) throws {
        try db.run(
            "INSERT INTO settings(key, value) VALUES('lastQuestionRow', ?) ON CONFLICT(key) DO UPDATE SET value = max(value, excluded.value)",
            [.int(row)])
    }

    /// An outcome as stored: NULL, or `{"choice":…,"guardian":…,"answeredAt":milliseconds}`.
    private static func stored(_ outcome: Outcome?) -> SQLValue {
        guard let o = outcome else { return .null }
        var out: [UInt8] = []
        out.append(contentsOf: #"{"choice":"#.utf8)
        o.choice.encode(into: &out)
        out.appendJSONField("guardian", o.guardian)
        out.appendJSONField("answeredAt", o.answeredAt.milliseconds)
        out.append(UInt8(ascii: "}"))
        return .utf8(out)
    }

}

/// Reads the hub outbox on a connection of its own (the bridge's threads, one at a time:
/// a connection is opened without SQLite's own mutex).
public final class HubOutboxReader: @unchecked Sendable {
    private let db: SQLiteDatabase
    private let lock = NSLock()

    /// Opened for writing, though it only reads: a read-only connection to a database in
    /// WAL mode fails ("not a database") when it comes before the writer's WAL index.
    init(path: String) throws {
        db = try SQLiteDatabase(path: path)
        try db.exec("PRAGMA busy_timeout = 5000")
    }

    /// Up to `limit` messages after `id`, in order.
    public func messages(after id: Int64, limit: Int) throws -> [HubOutbound] {
        try lock.withLock { try SQLiteStore.hubOutbox(after: id, limit: limit, in: db) }
    }

    /// The families the store holds.
    public func families() throws -> [String] {
        try lock.withLock {
            var out: [String] = []
            try db.run("SELECT id FROM families ORDER BY id") { r in out.append(r.text(0)) }
            return out
        }
    }
}
