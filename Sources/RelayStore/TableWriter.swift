// The tables' writer: a connection of its own on a thread of its own, writing one batch
// of journaled changes at a time while the loop goes on answering. The loop hands a
// batch over and collects the outcome later; everything else that writes (a checkpoint
// the caller waits for, pruning, reading the question keys at load) runs on the
// caller's thread once the writer is idle, through `exclusive`.

import Foundation
import RelayProtocol

/// Changes of the journal up to `generation`, to write in one transaction.
struct Batch: Sendable {
    var changes: [Change] = []
    var generation: Int64

    /// The events of each member, in order: grouped by the writer, so that the loop only
    /// appends changes (a list per member, made and grown every turn, cost the loop a hash
    /// and an allocation per event).
    var eventsByMember: [String: [EventRecord]] {
        var grouped: [String: [EventRecord]] = [:]
        for case .event(let e) in changes { grouped[e.member, default: []].append(e) }
        return grouped
    }
}

final class TableWriter: @unchecked Sendable {
    // The hand-over, guarded by `condition`.
    private let condition = NSCondition()
    private var pending: Batch?
    private var outcome: Result<Int64, any Error>?
    /// Written batches the loop is done with, freed here: taking apart thousands of
    /// changes is work the loop need not do.
    private var retired: [Batch] = []
    private var stopping = false
    private var running = true

    // Used only by the thread while a batch is pending, otherwise only inside `exclusive`.
    private let db: SQLiteDatabase
    private let sync: SyncMode
    /// Each stored question's row key: rows are keyed in order of asking, so writing
    /// new questions touches the table's last pages rather than one random page each.
    private var questionKeys: [QuestionID: Int64] = [:]
    private var lastQuestionKey: Int64 = 0
    /// The cursors of each member's durable sessions, as in the tables: an event all of
    /// them have acknowledged is not written at all (the contract lets it be dropped; most
    /// are acknowledged long before their batch is written), only its member's head.
    private var cursors: [String: [String: Int64]] = [:]

    init(db: SQLiteDatabase, sync: SyncMode) {
        self.db = db
        self.sync = sync
        let thread = Thread { self.run() }
        thread.name = "table-writer"
        thread.start()
    }

    /// Finishes the batch in hand, then ends the thread.
    func stop() {
        condition.lock()
        stopping = true
        condition.broadcast()
        while running { condition.wait() }
        condition.unlock()
    }

    private func run() {
        condition.lock()
        while true {
            while pending == nil && retired.isEmpty && !stopping { condition.wait() }
            if !retired.isEmpty {
                var done = retired
                retired = []
                condition.unlock()
                done.removeAll()
                condition.lock()
                continue
            }
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

    /// Whether no batch is being written.
    var isIdle: Bool {
        condition.lock()
        defer { condition.unlock() }
        return pending == nil
    }

    /// Hands back a written batch, to be freed on the thread.
    func retire(_ batch: consuming Batch) {
        condition.lock()
        retired.append(batch)
        condition.broadcast()
        condition.unlock()
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
        var forgotten: [QuestionID] = []
        try db.transaction {
            for change in batch.changes.folded() {
                if case .forgetQuestion(let key) = change { forgotten.append(key) }
                try write(change)
            }
            // After the batch's sessions: their cursors are written in the same transaction.
            for (member, events) in batch.eventsByMember {
                var kept = events[...]
                if let acknowledged = cursors[member]?.values.min() { kept = kept.drop { $0.seq <= acknowledged } }
                if kept.isEmpty {
                    try db.run(
                        "INSERT INTO heads(member, head) VALUES(?, ?) ON CONFLICT(member) DO UPDATE SET head = max(head, excluded.head)",
                        [.text(member), .int(events[events.count - 1].seq)])
                } else {
                    try SQLiteStore.insertBatch(db, member: member, kept)
                }
            }
            try db.run("INSERT OR REPLACE INTO settings(key, value) VALUES('journalGeneration', ?)", [.int(batch.generation)])
        }
        for id in forgotten { questionKeys[id] = nil }  // only once their rows are surely gone
    }

    /// Learns the stored durable sessions' cursors.
    func learnSessions(_ sessions: [SessionRecord]) {
        cursors.removeAll()
        for s in sessions { cursors[s.member, default: [:]][s.name] = s.cursor }
    }

    /// Reads the stored questions into `snapshot`, learning their row keys.
    func loadQuestions(into snapshot: inout StoreSnapshot) throws {
        questionKeys.removeAll()
        questionKeys.reserveCapacity(Int(try db.scalar("SELECT count(*) FROM questions") ?? 0))
        var questions: [QuestionRecord] = []
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
                    createdAt: Timestamp(milliseconds: r.int(4)), outcome: outcome))
            self.questionKeys[c.key] = r.int(7)
            self.lastQuestionKey = max(self.lastQuestionKey, r.int(7))
        }
        snapshot.questions = questions
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
                questionKeys[q.key]
                ?? {
                    lastQuestionKey += 1
                    questionKeys[q.key] = lastQuestionKey
                    return lastQuestionKey
                }()
            try db.run(
                "INSERT OR REPLACE INTO questions(key, id, child, family, status, attempt, createdAt, content, outcome) VALUES(?,?,?,?,?,?,?,?,?)",
                [
                    .int(key), .text(q.id), .text(q.child), .text(q.family), .text(q.status.rawValue), .int(q.attempt),
                    .int(q.createdAt.milliseconds), .utf8(q.content.encoded), Self.stored(q.outcome),
                ])
        case .forgetQuestion(let question):
            guard let key = questionKeys[question] else { return }
            try db.run("DELETE FROM questions WHERE key = ?", [.int(key)])
        case .questionState(let q):
            guard let key = questionKeys[q.key] else { return }
            try db.run(
                "UPDATE questions SET status = ?, attempt = ?, outcome = ? WHERE key = ?",
                [.text(q.status.rawValue), .int(q.attempt), Self.stored(q.outcome), .int(key)])
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
            cursors[s.member, default: [:]][s.name] = s.cursor
        case .dropSessions(let member):
            try db.run("DELETE FROM sessions WHERE member = ?", [.text(member)])
            cursors[member] = nil
        case .event:
            break  // written per member in batches
        }
    }

    /// `{"choice":…,"guardian":…,"answeredAt":milliseconds}`.
    private static func stored(_ outcome: Outcome?) -> SQLValue {
        guard let o = outcome else { return .null }
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.appendJSONKey("choice")
        o.choice.encode(into: &out)
        out.appendJSONField("guardian", o.guardian)
        out.appendJSONField("answeredAt", o.answeredAt.milliseconds)
        out.append(UInt8(ascii: "}"))
        return .utf8(out)
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
