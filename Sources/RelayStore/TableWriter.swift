// The tables' writer: a connection of its own on a thread of its own, writing one batch
// of journaled changes at a time while the loop goes on answering. The loop hands a
// batch over and collects the outcome later; everything else that writes (a checkpoint
// the caller waits for, pruning, reading the question keys at load) runs on the
// caller's thread once the writer is idle, through `exclusive`. A batch is the journal's
// bytes, read here in place: the writer shares no object with the loop (counting
// references to the loop's records and freeing them from this thread, with the cache
// lines going back and forth between the cores, cost both threads more than the rows).

import CSystem
import Foundation
import RelayProtocol

/// The journal's records up to `generation`, to write in one transaction: their changes
/// one after another, in the journal's bytes (read in place by the writer, so that
/// handing a batch over shares one buffer rather than thousands of records).
struct Batch: Sendable {
    var bytes: [UInt8] = []
    /// How many changes `bytes` holds.
    var count = 0
    var generation: Int64

    mutating func append(_ record: UnsafeBufferPointer<UInt8>, count: Int) {
        bytes.append(contentsOf: record)
        self.count += count
    }
}

final class TableWriter: @unchecked Sendable {
    // The hand-over, guarded by `condition`.
    private let condition = NSCondition()
    private var pending: Batch?
    private var outcome: Result<Int64, any Error>?
    private var stopping = false
    private var running = true
    private var held = false

    // Used only by the thread while a batch is pending, otherwise only inside `exclusive`.
    private let db: SQLiteDatabase
    private let sync: SyncMode
    /// A question's row key is the row the core gave it (`QuestionRecord.row`): in order of
    /// asking, so writing new questions touches the table's last pages rather than one
    /// random page each, and known without a map of every question's (at a relay's limit
    /// of questions, such a map's lookups, each for a question long out of the caches,
    /// took a tenth of the writer's time). Only questions journaled without a row, by a
    /// relay from before rows were given, are found by id, in this map, read from the
    /// table the first time one is met.
    private var keysByID: [QuestionID: Int64]?
    /// The highest row key the table has held since load (where keys for questions
    /// journaled without a row continue).
    private var lastQuestionKey: Int64 = 0
    /// The cursors of each member's durable sessions, as in the tables: an event all of
    /// them have acknowledged is not written at all (the contract lets it be dropped; most
    /// are acknowledged long before their batch is written), only its member's head.
    private var cursors: [String: [String: Int64]] = [:]
    /// Cursors that acks have moved, posted by the loop as they move (newer than the tables').
    let board = CursorBoard()
    /// The board's posts, filed at the start of each batch.
    private var posted = PostedCursors()
    /// Where an outcome or a row of events is put together, kept from one to the next.
    private var scratch: [UInt8] = []
    /// Where a question's content is closed when the journal holds it open (`withContent`).
    private var contentScratch: [UInt8] = []
    /// When the thread started its batch or last offered its core to others, and how often
    /// it has offered it (for tests).
    private var lastYield = 0
    private(set) var yields = 0
    /// Rows since the clock was last read (reading it costs about what reading a row does).
    private var unpaced = 0

    init(db: SQLiteDatabase, sync: SyncMode) {
        self.db = db
        self.sync = sync
        Thread { self.run() }.start()
    }

    /// Finishes the batch in hand, then ends the thread.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    /// How much less of a contended core the thread asks for than the event loop: the
    /// loop answers clients and the writer only catches up with the journal, which holds
    /// every change durably meanwhile (and the loop waits for a writer far behind).
    static let niceness: Int32 = 10

    /// How long the writer works before it offers its core to any thread waiting for one
    /// (`sched_yield`, back at once when none is). Woken with a batch, the writer often takes
    /// the core of the client the loop is talking to, and the kernel leaves that client
    /// waiting behind it until its next tick (4 ms here) rather than moving it to the other
    /// core, even an idle one: at (100, 1) such waits held every question in flight up to
    /// 5 ms, some 40 times in 5 seconds.
    static let yieldAfterNanos = 100_000

    /// Offers the core to others once the writer has worked `yieldAfterNanos` (called
    /// between rows: a row takes a few microseconds; the clock is read every eighth).
    private func pace() {
        unpaced += 1
        guard unpaced >= 8 else { return }
        unpaced = 0
        let now = monotonicNanos()
        guard now - lastYield >= Self.yieldAfterNanos else { return }
        sched_yield()
        yields += 1
        lastYield = monotonicNanos()
    }

    /// The thread's name where `top -H`, `ps -L` and `perf` show it (Foundation's
    /// `Thread.name` does not reach the kernel here).
    static let threadName = "table-writer"

    private func run() {
        _ = cs_name_thread(Self.threadName)
        _ = cs_lower_thread_priority(Self.niceness)
        condition.lock()
        while true {
            while (pending == nil || held) && !stopping { condition.wait() }
            guard let batch = pending else { break }
            condition.unlock()
            let result = Result { () throws(any Error) -> Int64 in
                try self.write(batch)
                return batch.generation
            }
            condition.lock()
            pending = nil
            outcome = result
            condition.broadcast()
        }
        running = false
        condition.broadcast()
        condition.unlock()
    }

    /// Starts writing `batch` on the thread; one batch at a time.
    func submit(_ batch: Batch) {
        condition.lock()
        precondition(pending == nil, "a batch is already being written")
        pending = batch
        outcome = nil
        condition.broadcast()
        condition.unlock()
    }

    /// Tests: while held, a batch handed over waits to be written (so that what a test
    /// sees does not depend on how fast the thread is).
    func hold(_ on: Bool) {
        condition.lock()
        held = on
        condition.broadcast()
        condition.unlock()
    }

    /// Tests: whether no batch is being written.
    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return pending == nil
    }

    /// The generation written, or the error, once the batch handed over is done; nil
    /// while it is still being written (unless `wait`) or when none was handed over.
    func takeOutcome(wait: Bool) -> Result<Int64, any Error>? {
        condition.lock()
        defer { condition.unlock() }
        if wait { while pending != nil { condition.wait() } }
        defer { outcome = nil }
        return outcome
    }

    /// Runs `body` on the caller's thread once no batch is being written.
    func exclusive<T>(_ body: (TableWriter) throws -> T) throws -> T {
        condition.lock()
        defer { condition.unlock() }
        while pending != nil { condition.wait() }
        return try body(self)
    }

    // MARK: - Writing (on whichever thread holds the writer)

    /// Writes `batch` and records its generation, in one transaction that reaches the
    /// disk even where commits otherwise need not: the journal is reused after it.
    func write(_ batch: Batch) throws {
        if sync == .normal { try db.exec("PRAGMA synchronous = FULL") }
        defer { if sync == .normal { try? db.exec("PRAGMA synchronous = NORMAL") } }
        posted.file(from: board)
        var folded = FoldedChanges(reservingCapacity: batch.count)
        var reader = ByteReader(bytes: batch.bytes)
        lastYield = monotonicNanos()
        while !reader.atEnd {
            try folded.add(JournaledChange.read(from: &reader), in: batch.bytes)
            pace()
        }
        let changes = folded.changes
        var forgotten: [QuestionID] = []  // found by id
        let cursorsBefore = cursors  // what the tables keep if the transaction fails
        do {
            try batch.bytes.withUnsafeBufferPointer { bytes in
                var events: [MemberBytes: [EventRow]] = [:]  // keys point into `bytes`
                try db.transaction {
                    for change in changes {
                        pace()
                        switch change {
                        case .question(let q):
                            try write(q, in: bytes)
                        case .forgetQuestion(let question, let row):
                            if row == 0 { forgotten.append(question) }
                            guard let key = try storedKey(of: question, row: row) else { break }
                            try db.run("DELETE FROM questions WHERE key = ?", [.int(key)])
                        case .event(let e):
                            events[MemberBytes(bytes.raw(e.member)), default: []].append(e)
                        case .other(let at):
                            try write(JournaledChange.other(at: at, in: batch.bytes))
                        }
                    }
                    // After the batch's sessions: their cursors are written in the same transaction.
                    for (member, rows) in events {
                        try write(events: rows, of: String(decoding: member.bytes, as: UTF8.self), in: bytes)
                        pace()
                    }
                    try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES('journalGeneration', ?)", [.int(batch.generation)])
                }
            }
        } catch {
            cursors = cursorsBefore
            throw error
        }
        for id in forgotten { keysByID?[id] = nil }  // only once their rows are surely gone
    }

    /// Whether `keysByID` was read (for tests).
    var hasFoundQuestionsByID: Bool { keysByID != nil }

    /// The row keys of the questions in the table, by id (for changes journaled without rows).
    private func storedKeys() throws -> [QuestionID: Int64] {
        if let keysByID { return keysByID }
        var keys: [QuestionID: Int64] = [:]
        try db.run("SELECT id, key FROM questions") { r in
            if let id = QuestionID(r.text(0)) { keys[id] = r.int(1) }
        }
        keysByID = keys
        return keys
    }

    /// The row key of a stored question: its row, or for one journaled without a row (0),
    /// the key it has in the table; nil if it has none.
    private func storedKey(of id: QuestionID, row: Int64) throws -> Int64? {
        row != 0 ? row : try storedKeys()[id]
    }

    /// The row key of `q`: its row, or for a question journaled without one, the key it
    /// has in the table, or the next one.
    private func rowKey(of q: QuestionRow) throws -> Int64 {
        if q.row != 0 {
            lastQuestionKey = max(lastQuestionKey, q.row)
            return q.row
        }
        if let key = try storedKeys()[q.key] { return key }
        lastQuestionKey += 1
        keysByID?[q.key] = lastQuestionKey
        return lastQuestionKey
    }

    private func write(_ q: QuestionRow, in bytes: UnsafeBufferPointer<UInt8>) throws {
        try withStored(q.outcome, in: bytes) { outcome in
            guard let asked = q.asked else {
                guard let key = try storedKey(of: q.key, row: q.row) else { return }
                try db.run(
                    "UPDATE questions SET status = ?, attempt = ?, outcome = ? WHERE key = ?",
                    [.textAt(bytes.raw(q.status)), .int(q.attempt), outcome, .int(key)])
                return
            }
            let key = try rowKey(of: q)
            try withContent(of: asked, in: bytes) { content in
                try db.run(
                    "INSERT OR REPLACE INTO questions(key, id, child, family, status, attempt, createdAt, content, outcome) VALUES(?,?,?,?,?,?,?,?,?)",
                    [
                        .int(key), .textAt(bytes.raw(q.id)), .textAt(bytes.raw(asked.child)), .textAt(bytes.raw(asked.family)),
                        .textAt(bytes.raw(q.status)), .int(q.attempt), .int(asked.createdAt), .textAt(content), outcome,
                    ])
            }
        }
    }

    /// Runs `body` with a question's content: in place, or closed in `contentScratch` when
    /// the journal holds it as a copy without its closing brace.
    private func withContent(
        of asked: QuestionRow.Asked, in bytes: UnsafeBufferPointer<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        guard asked.isOpen else { return try body(bytes.raw(asked.content)) }
        contentScratch.removeAll(keepingCapacity: true)
        contentScratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[asked.content]))
        contentScratch.append(UInt8(ascii: "}"))
        try contentScratch.withUnsafeBytes(body)
    }

    /// A member's events of the batch as one row, leaving out those every durable session
    /// of the member has acknowledged; only the head when that is all of them.
    private func write(events rows: [EventRow], of member: String, in bytes: UnsafeBufferPointer<UInt8>) throws {
        var kept = rows[...]
        if let acknowledged = try acknowledged(by: member, in: rows) { kept = kept.drop { $0.seq <= acknowledged } }
        guard let first = kept.first, let last = kept.last else {
            try db.run(
                "INSERT INTO heads(member, head) VALUES(?, ?) ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)",
                [.text(member), .int(rows[rows.count - 1].seq)])
            return
        }
        scratch.removeAll(keepingCapacity: true)
        for e in kept { scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[e.encoded])) }  // EventBatch's form
        try scratch.withUnsafeBytes { blob in
            try SQLiteStore.insertBatchRow(
                db, member: member, seqs: first.seq...last.seq, firstAt: first.at, lastAt: kept.lazy.map(\.at).max() ?? first.at,
                count: kept.count, events: .blobAt(blob))
        }
    }

    /// How far every durable session of `member` has acknowledged its stream (its events
    /// `rows` of the batch), counting the acks posted since the batch was handed over. Those
    /// cursors are then stored with it, so the tables never hold a cursor below an event
    /// they left out: each is a row to write, worth it only when it leaves out at least
    /// two events (with thousands of members each acking an event or two, the cursors
    /// would cost more than the events).
    private func acknowledged(by member: String, in rows: [EventRow]) throws -> Int64? {
        guard let stored = cursors[member], let acknowledged = stored.values.min() else { return nil }
        var moved: [(session: String, cursor: Int64)] = []
        for (name, cursor) in stored {
            if let p = posted[member, name], p > cursor { moved.append((name, p)) }
        }
        guard !moved.isEmpty else { return acknowledged }
        var merged = stored
        for m in moved { merged[m.session] = m.cursor }
        let now = merged.values.min() ?? acknowledged
        guard rows.lazy.filter({ $0.seq > acknowledged && $0.seq <= now }).count >= 2 * moved.count else { return acknowledged }
        for m in moved {
            try db.run(
                "UPDATE sessions SET cursor = max(cursor, ?) WHERE member = ? AND name = ?",
                [.int(m.cursor), .text(member), .text(m.session)])
        }
        cursors[member] = merged
        return now
    }

    /// Learns the stored durable sessions' cursors.
    func learnSessions(_ sessions: [SessionRecord]) {
        cursors.removeAll()
        for s in sessions { cursors[s.member, default: [:]][s.name] = s.cursor }
    }

    /// Reads the stored questions into `snapshot`, each with its row key as its row.
    func loadQuestions(into snapshot: inout StoreSnapshot) throws {
        keysByID = nil
        lastQuestionKey = 0
        var questions: [QuestionRecord] = []
        questions.reserveCapacity(Int(try db.scalar("SELECT count(*) FROM questions") ?? 0))
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
            questions.append(
                QuestionRecord(
                    content: c, child: r.text(0), family: r.text(1), status: status, attempt: r.int(3),
                    createdAt: Timestamp(milliseconds: r.int(4)), outcome: outcome, row: r.int(7)))
            self.lastQuestionKey = max(self.lastQuestionKey, r.int(7))
        }
        snapshot.questions = questions
        snapshot.lastQuestionRow = lastQuestionKey
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
        case .question, .questionState, .forgetQuestion, .event:
            preconditionFailure("read as rows, never as changes")
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
            // A cursor never goes back: the tables may hold one newer than the journal's.
            try db.run(
                """
                INSERT INTO sessions(member, name, cursor, topics) VALUES(?,?,?,?)
                ON CONFLICT(member, name) DO UPDATE SET cursor = max(cursor, excluded.cursor), topics = excluded.topics
                """,
                [.text(s.member), .text(s.name), .int(s.cursor), .text(s.topics.map(\.rawValue).sorted().joined(separator: ","))])
            cursors[s.member, default: [:]][s.name] = max(s.cursor, cursors[s.member]?[s.name] ?? s.cursor)
        case .dropSessions(let member):
            try db.run("DELETE FROM sessions WHERE member = ?", [.text(member)])
            cursors[member] = nil
        case .dropSession(let member, let name):
            try db.run("DELETE FROM sessions WHERE member = ? AND name = ?", [.text(member), .text(name)])
            cursors[member]?[name] = nil
        }
    }

    /// Runs `body` with the outcome as stored: NULL, or
    /// `{"choice":…,"guardian":…,"answeredAt":milliseconds}` (written into `scratch`).
    private func withStored(_ outcome: QuestionRow.Answer?, in bytes: UnsafeBufferPointer<UInt8>, _ body: (SQLValue) throws -> Void)
        throws
    {
        guard let o = outcome else { return try body(.null) }
        scratch.removeAll(keepingCapacity: true)
        scratch.append(literal: #"{"choice":"#)
        scratch.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[o.choice]))
        scratch.appendJSONField("guardian", String(decoding: bytes[o.guardian], as: UTF8.self))
        scratch.appendJSONField("answeredAt", o.answeredAt)
        scratch.append(UInt8(ascii: "}"))
        try scratch.withUnsafeBytes { try body(.textAt($0)) }
    }

    func prune(olderThan cutoff: Timestamp, acknowledged upTo: [String: Int64]) throws -> Int {
        var dropped = 0
        try db.transaction {
            // Heads are kept apart from the events so a stream's seq never repeats once its
            // events are gone; a head only ever rises.
            try db.run(
                """
                INSERT INTO heads(member, head)
                SELECT member, max(lastSeq) FROM eventBatches
                WHERE member IN (SELECT DISTINCT member FROM eventBatches WHERE firstAt < ?) GROUP BY member
                ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)
                """, [.int(cutoff.milliseconds)])
            for member in upTo.keys {
                try db.run(
                    """
                    INSERT INTO heads(member, head) SELECT member, max(lastSeq) FROM eventBatches WHERE member = ? GROUP BY member
                    ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)
                    """, [.text(member)])
            }
            // Whole batches go at once; a batch that straddles the line keeps its newer events.
            dropped += try dropBatches(
                where: "firstAt < ?1 AND lastAt < ?1", [.int(cutoff.milliseconds)], straddling: "firstAt < ?1"
            ) { $0.at >= cutoff }
            for (member, seq) in upTo where seq > 0 {
                dropped += try dropBatches(
                    where: "member = ?1 AND lastSeq <= ?2", [.text(member), .int(seq)], straddling: "member = ?1 AND firstSeq <= ?2"
                ) { $0.seq > seq }
            }
        }
        return dropped
    }

    /// Deletes the batches matching `whole`, then rewrites those matching `straddling`
    /// with only the events `keep` allows. Returns how many events went.
    private func dropBatches(
        where whole: String, _ args: [SQLValue], straddling: String, keep: (EventRecord) -> Bool
    ) throws -> Int {
        var dropped = Int(try db.scalar(dynamic: "SELECT coalesce(sum(count), 0) FROM eventBatches WHERE \(whole)", args) ?? 0)
        try db.run(dynamic: "DELETE FROM eventBatches WHERE \(whole)", args)
        var rewrites: [(id: Int64, member: String, events: [EventRecord])] = []
        try db.run(dynamic: "SELECT id, member, events FROM eventBatches WHERE \(straddling)", args) { r in
            rewrites.append((r.int(0), r.text(1), try EventBatch.decode(r.blob(2), member: r.text(1))))
        }
        for batch in rewrites {
            let kept = batch.events.filter(keep)
            dropped += batch.events.count - kept.count
            try db.run("DELETE FROM eventBatches WHERE id = ?", [.int(batch.id)])
            try SQLiteStore.insertBatch(db, member: batch.member, kept[...])
        }
        return dropped
    }
}

/// A member's id where it lies in a batch's bytes: events are grouped by it without making
/// a string of each one's (a string per member instead).
private struct MemberBytes: Hashable {
    let bytes: UnsafeRawBufferPointer
    init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    static func == (a: Self, b: Self) -> Bool {
        a.bytes.count == b.bytes.count && (a.bytes.count == 0 || memcmp(a.bytes.baseAddress!, b.bytes.baseAddress!, a.bytes.count) == 0)
    }

    func hash(into hasher: inout Hasher) { hasher.combine(bytes: bytes) }
}

extension UnsafeBufferPointer<UInt8> {
    fileprivate func raw(_ range: Range<Int>) -> UnsafeRawBufferPointer {
        UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: self[range]))
    }
}
