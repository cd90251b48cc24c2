// The questions the core does not keep in memory (QuestionArchive), read on the loop's
// connection; and, on the writer's, the upkeep of the tables that find them.
//
// Questions are found by id (`questionIDs`) and by child in list order (`questionPlaces`),
// tables filled in bulk rather than at each commit: ids are chosen by clients, so an
// index kept up at every commit wrote a page of it per question asked. A question stored
// above the mark (`QuestionTail.indexedThrough`) is listed in memory instead, from its
// commit until an indexing pass has added it: a pass takes every listed question up to
// the newest, sorted, in steps of a thousand, so that each step writes only the pages of
// its stretch of each table and each page is written about once a pass. The schema's
// triggers keep the tables right when a question goes or is asked anew under another time.
// A pass also lists the rows it goes by that are pending (`pendingQuestions`, read at
// start), and sweeps from that list the questions answered since.

import Glibc
import RelayModel
import RelayProtocol

/// The stored questions that are not in the lookup tables yet. Changed by the writer after
/// each commit and indexing step, read by the loop.
struct QuestionTail: Sendable {
    struct Entry: Sendable {
        let row: Int64
        let id: QuestionID
        let child: String
        var createdAt: Int64
    }
    /// Every question row up to it is in the lookup tables (or gone); every one above it is listed.
    var indexedThrough: Int64 = 0
    /// In order of their rows (given in order; a question asked anew keeps its row).
    var entries: [Entry] = []
    /// The rows of the listed ids: noted since the pass under way began, and before it (that
    /// pass's, all let go together when it ends, rather than one by one). An entry that
    /// outlives its listing is harmless: it still names the question's row.
    private var byID: [QuestionID: Int64] = [:]
    private var passByID: [QuestionID: Int64] = [:]
    /// When the last pass ended (monotonic milliseconds).
    var lastPass: Int64 = 0
    /// The last row of the pass under way (or of the last one): a pass may go by every row
    /// up to it before it moves the mark there.
    private var passUpTo: Int64 = 0
    /// Every row up to it has been gone by, or may be, by a pass listing the pending
    /// questions it finds (`pendingQuestions`): one pending again at or below it must be
    /// listed with its commit, as the pass may have found it finished.
    var passedThrough: Int64 { max(indexedThrough, passUpTo) }

    /// The row of a listed question.
    func row(of id: QuestionID) -> Int64? { byID[id] ?? passByID[id] }

    /// How many ids are held: each goes when the pass that takes it ends.
    var idsHeld: Int { byID.count + passByID.count }

    mutating func note(_ entry: Entry) {
        guard entry.row > indexedThrough else { return }
        byID[entry.id] = entry.row
        // Nearly always a new row, above every listed one.
        guard let last = entries.last, entry.row <= last.row else { return entries.append(entry) }
        let i = position(of: entry.row)
        if i < entries.count && entries[i].row == entry.row { entries[i] = entry } else { entries.insert(entry, at: i) }
    }

    /// A pass begins with every listed question: their ids go with it, and those noted from
    /// now on go into `fresh` (made before the lock is taken). The pass before has ended
    /// (`trim`): one pass at a time, resumed after a failed step, never dropped.
    mutating func passBegins(through: Int64, fresh: consuming [QuestionID: Int64]) {
        passUpTo = through
        passByID = byID
        byID = fresh
    }

    /// Where `row` is listed, or would be.
    private func position(of row: Int64) -> Int {
        var (lo, hi) = (0, entries.count)
        while lo < hi {
            let mid = (lo + hi) / 2
            if entries[mid].row < row { lo = mid + 1 } else { hi = mid }
        }
        return lo
    }

    /// Where `row` is listed.
    func index(of row: Int64) -> Int? {
        let i = position(of: row)
        return i < entries.count && entries[i].row == row ? i : nil
    }

    /// The places of the listed questions of `child`.
    func places(of child: String) -> [QuestionPlace] {
        entries.lazy.filter { $0.child == child }.map { QuestionPlace(createdAt: $0.createdAt, row: $0.row) }
    }

    /// Forgets the listed rows up to `mark`, the end of the pass that has added them to the
    /// lookup tables. Returns the pass's ids, for the caller to let go of outside its lock.
    mutating func trim(through mark: Int64) -> [QuestionID: Int64] {
        indexedThrough = max(indexedThrough, mark)
        entries.removeFirst(position(of: mark + 1))
        defer { passByID = [:] }
        return passByID
    }
}

/// An indexing pass under way (the writer's alone): the listed questions up to `through`,
/// sorted by each table's key, and how far it has come.
struct QuestionIndexPass {
    /// The rows it goes by: above `from`, up to `through`.
    let from: Int64
    let through: Int64
    let ids: [(high: Int64, low: Int64, row: Int64)]
    let places: [Int64]
    var done = 0

    /// Entries of each table one step adds: a step holds commits up for a few milliseconds.
    static let step = 1024

    init(_ tail: QuestionTail) {
        from = tail.indexedThrough
        through = tail.entries.last?.row ?? tail.indexedThrough
        ids = tail.entries.map { e in
            let id = SQLiteStore.idColumns(e.id)
            return (id.high, id.low, e.row)
        }.sorted { ($0.high, $0.low) < ($1.high, $1.low) }
        // By child, each child's in order of rows (given in order of asking, so of time too).
        let byChild = Dictionary(grouping: tail.entries.lazy.map { ($0.child, $0.row) }, by: \.0)
        places = byChild.keys.sorted().flatMap { byChild[$0]!.map(\.1) }
    }

    var finished: Bool { done >= ids.count }

    /// The rows whose pending questions the step of `stretch` (of `ids`) lists, those above
    /// `after` up to `upTo`: the same share of the pass's rows, so that its steps go by each
    /// row once, and by all of them.
    func rows(of stretch: Range<Int>) -> (after: Int64, upTo: Int64) {
        let share = { (i: Int) in from + (through - from) * Int64(i) / Int64(max(ids.count, 1)) }
        return (share(stretch.lowerBound), stretch.upperBound == ids.count ? through : share(stretch.upperBound))
    }
}

extension SQLiteStore {
    /// The columns `question(from:)` reads, in order, from `questions q` joined with
    /// `withState`: a question's state is its row in `questionStates` when it has one.
    static let questionColumns = """
        q.child, q.family, \(status), coalesce(s.attempt, q.attempt), q.createdAt, q.content,
        CASE WHEN s.key IS NULL THEN q.outcome ELSE s.outcome END, q.key
        """
    /// Joins a question `q` with its state's row `s`, if any.
    static let withState = "LEFT JOIN questionStates s ON s.key = q.key"
    /// A question's status, in a query joined `withState`.
    static let status = "coalesce(s.status, q.status)"
    /// A finished question, in a query joined `withState`. Only these are let go (forgotten,
    /// or left out of what start reads): a status damaged on disk is none of them, so its
    /// question is read, and refused as damaged, rather than dropped unseen.
    static let finishedStatuses = "('answered', 'cancelled', 'expired')"
    static let finished = "\(status) IN \(finishedStatuses)"
    static let notFinished = "(\(status) IS NULL OR \(status) NOT IN \(finishedStatuses))"

    /// A question from a row of `questionColumns`.
    static func question(from r: Row) throws -> QuestionRecord {
        guard let content = QuestionContent(encoded: r.blob(5)), let status = QuestionStatus(rawValue: r.text(2)) else {
            throw unreadable("question", String(r.text(5).prefix(80)))
        }
        var outcome: Outcome?
        if !r.isNull(6) {
            guard let o = try? JSON.parse(r.text(6)), let choice = o["choice"].flatMap(Choice.init(json:)),
                let guardian = o["guardian"]?.string, let at = o["answeredAt"]?.int
            else { throw unreadable("outcome of question", content.id) }
            outcome = Outcome(choice: choice, guardian: guardian, answeredAt: Timestamp(milliseconds: at))
        }
        return QuestionRecord(
            content: content, child: r.text(0), family: r.text(1), status: status, attempt: r.int(3),
            createdAt: Timestamp(milliseconds: r.int(4)), outcome: outcome, row: r.int(7))
    }

    /// Lists the rows above the mark: what `QuestionTail` holds.
    func loadQuestionTail() throws {
        let t = try Self.questionTail(from: db)
        questionTail.withLock { $0 = t }
    }

    /// The rows above the mark, as a start lists them (`check` reads them the same way).
    static func questionTail(from db: SQLiteDatabase) throws -> QuestionTail {
        var t = QuestionTail()
        t.indexedThrough = try db.scalar("SELECT value FROM settings WHERE key = 'questionsIndexedThrough'") ?? 0
        t.lastPass = monotonicMillis()
        try db.run("SELECT id, child, createdAt, key FROM questions WHERE key > ? ORDER BY key", [.int(t.indexedThrough)]) { r in
            guard let id = QuestionID(r.text(0)) else { throw unreadable("question id", r.text(0)) }
            t.note(QuestionTail.Entry(row: r.int(3), id: id, child: r.text(1), createdAt: r.int(2)))
        }
        return t
    }

    private static let questionByRow = "SELECT \(questionColumns) FROM questions q \(withState) WHERE q.key = ?"
    /// A question's status alone: its columns come before the content, so a large one is not read.
    private static let statusByRow = "SELECT \(status) FROM questions q \(withState) WHERE q.key = ?"
    private static let questionByID =
        "SELECT \(questionColumns) FROM questionIDs i JOIN questions q ON q.key = i.key \(withState) WHERE i.high = ? AND i.low = ?"

    private func question(row: Int64) throws -> QuestionRecord? {
        var found: QuestionRecord?
        try reader.run(dynamic: Self.questionByRow, [.int(row)]) { found = try Self.question(from: $0) }
        return found
    }

    public func question(_ id: QuestionID) throws -> QuestionRecord? {
        // A new id, nearly always: known not to be stored without a lookup.
        guard storedIDs.mayHold(id) else { return nil }
        if let row = questionTail.withLock({ $0.row(of: id) }) { return try question(row: row) }
        let key = Self.idColumns(id)
        var found: QuestionRecord?
        try reader.run(dynamic: Self.questionByID, [.int(key.high), .int(key.low)]) { found = try Self.question(from: $0) }
        return found
    }

    public func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int)
        throws -> [QuestionRecord]
    {
        func inOrder(_ a: QuestionPlace, _ b: QuestionPlace) -> Bool { newestFirst ? a > b : a < b }
        let place = after ?? QuestionPlace(createdAt: newestFirst ? .max : .min, row: newestFirst ? .max : .min)
        // The listed rows first: a pass that ends between the two reads has its rows in the
        // tables by then (it trims the list only once they are committed there).
        let listed = questionTail.withLock { $0.places(of: child) }
        let (beyond, order) = newestFirst ? ("<", "DESC") : (">", "ASC")
        var sql = """
            SELECT \(Self.questionColumns) FROM questionPlaces p JOIN questions q ON q.key = p.key \(Self.withState)
            WHERE p.child = ? AND (p.createdAt, p.key) \(beyond) (?, ?)
            """
        var args: [SQLValue] = [.text(child), .int(place.createdAt), .int(place.row)]
        if let status {
            sql += " AND \(Self.status) = ?"
            args.append(.text(status.rawValue))
        }
        sql += " ORDER BY p.createdAt \(order), p.key \(order) LIMIT ?"
        args.append(.int(Int64(min(limit, Int(Int32.max)))))
        var out: [QuestionRecord] = []
        try reader.run(dynamic: sql, args) { out.append(try Self.question(from: $0)) }
        // The child's rows not in the lookup tables yet (or added by a pass under way): those
        // past `place`, in list order, each read whole, and only until `limit` of them are
        // found: no later one can make the page, and a child may have thousands listed.
        guard !listed.isEmpty else { return out }
        let inTables = Set(out.map(\.row))
        var taken = 0
        for candidate in listed.filter({ !inTables.contains($0.row) && inOrder(place, $0) }).sorted(by: inOrder) {
            guard taken < limit else { break }
            if let status {
                var stored: String?
                try reader.run(dynamic: Self.statusByRow, [.int(candidate.row)]) { stored = $0.text(0) }
                guard stored == status.rawValue else { continue }
            }
            guard let q = try question(row: candidate.row), status == nil || q.status == status, inOrder(place, QuestionPlace(q)) else {
                continue
            }
            out.append(q)
            taken += 1
        }
        out.sort { inOrder(QuestionPlace($0), QuestionPlace($1)) }
        return Array(out.prefix(limit))
    }

    public func updateQuestionLookups() throws -> Bool {
        try indexQuestionsStep(force: false)
    }

    /// Adds every listed question to the lookup tables, in one pass of all its steps.
    public func indexQuestions() throws {
        while try indexQuestionsStep(force: true) {}
    }

    /// One step of an indexing pass; starts a pass when enough questions are listed (or
    /// some have been for `questionIndexSeconds`, or `force`). Returns whether a pass is
    /// under way.
    func indexQuestionsStep(force: Bool) throws -> Bool {
        let now = Self.monotonicMillis()
        // The tail changes only in commits and here, never two at once (the writer's jobs, or a
        // commit the loop makes while the writer is idle): a pass sorts a copy, and the loop's
        // reads never wait for a sort.
        if indexPass == nil {
            let t = questionTail.withLock { $0 }
            if !t.entries.isEmpty,
                force || t.entries.count >= Self.questionIndexBatch || Double(now - t.lastPass) >= questionIndexSeconds * 1000
            {
                let pass = QuestionIndexPass(t)
                indexPass = pass
                let fresh = [QuestionID: Int64](minimumCapacity: t.entries.count)  // about as many before the next pass
                questionTail.withLock { $0.passBegins(through: pass.through, fresh: fresh) }
            }
        }
        guard var pass = indexPass else { return false }
        let stretch = pass.done..<min(pass.done + QuestionIndexPass.step, pass.ids.count)
        // Places in the same share of their sorted list as the ids, each as listed now (asked
        // anew since the pass began, a question's time may have moved).
        let share = { (i: Int) in i * pass.places.count / max(pass.ids.count, 1) }
        let places = questionTail.withLock { t in
            pass.places[share(stretch.lowerBound)..<share(stretch.upperBound)].compactMap { t.index(of: $0).map { t.entries[$0] } }
        }
        try db.transaction {
            for e in places {
                try db.run(
                    "INSERT OR IGNORE INTO questionPlaces(child, createdAt, key) VALUES(?, ?, ?)",
                    [.text(e.child), .int(e.createdAt), .int(e.row)])
            }
            for e in pass.ids[stretch] {
                try db.run("INSERT OR REPLACE INTO questionIDs(high, low, key) VALUES(?, ?, ?)", [.int(e.high), .int(e.low), .int(e.row)])
            }
            let rows = pass.rows(of: stretch)
            try db.run(
                dynamic:
                    "INSERT OR IGNORE INTO pendingQuestions(key) SELECT q.key FROM questions q \(Self.withState) WHERE q.key > ? AND q.key <= ? AND \(Self.notFinished)",
                [.int(rows.after), .int(rows.upTo)])
            // Twice what a step may list: the entries answered since stay fewer than the pending.
            try sweepPendingList(limit: 2 * QuestionIndexPass.step)
            if stretch.upperBound == pass.ids.count {
                try db.run(
                    "INSERT OR REPLACE INTO settings(key, value) VALUES('questionsIndexedThrough', ?)", [.int(pass.through)])
            }
        }
        pass.done = stretch.upperBound
        guard pass.finished else {
            indexPass = pass
            return true
        }
        indexPass = nil
        // The pass's ids are freed once the lock is let go.
        _ = questionTail.withLock { t in
            t.lastPass = now
            return t.trim(through: pass.through)
        }
        return false
    }

    /// Listed questions past which a pass starts at once.
    static let questionIndexBatch = 50_000

    /// One step of forgetting the oldest finished questions of the children past `limits`,
    /// among those in the lookup tables; returns whether more are due. A pass chooses them
    /// all, then deletes them in order of rows (the oldest rows, near one another) at most
    /// `limit` a step. Their entries in the lookup by id are left: an id whose row is gone
    /// is not found, and a sweep drops such entries in order of ids, a stretch with each
    /// step, rather than a page of that table written for each one.
    public func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        if forgetPass == nil {
            forgetPass = try questionsToForget(beyond: limits)
            if forgetPass == nil { return false }
        }
        guard let rows = forgetPass else { return false }
        let step = rows[forgotten...].prefix(min(limit, Self.forgetStep))
        try db.exec("PRAGMA secure_delete = FAST")
        defer { try? db.exec("PRAGMA secure_delete = \(secureDelete)") }
        try db.transaction {
            // Each row's place and tally go with it (the schema's triggers). A question asked
            // again since the pass chose it is pending again: it stays.
            for row in step {
                try db.run(
                    """
                    DELETE FROM questions WHERE key = ?1
                        AND coalesce((SELECT status FROM questionStates WHERE key = ?1), status) IN ('answered', 'cancelled', 'expired')
                    """,
                    [.int(row)])
            }
            // Rows are never given twice, also once their question is gone.
            if let top = step.max() { try noteQuestionRow(top) }
        }
        forgotten = step.endIndex
        if forgotten == rows.count { (forgetPass, forgotten) = (nil, 0) }
        try sweepQuestionIDs(limit: 4 * step.count)
        return forgetPass != nil
    }

    /// Questions one forgetting step deletes at most: a step holds commits up for a few
    /// milliseconds.
    static let forgetStep = 256
    /// Questions one forgetting pass chooses at most, shared among the children past their
    /// limits: a choice reads what it chooses, in one job of the writer's.
    static let forgetPassRows = 8192

    /// The rows to forget for every child past `limits`, in order; nil when none is due.
    private func questionsToForget(beyond limits: QuestionsKept) throws -> [Int64]? {
        var over: [(child: String, count: Int64, bytes: Int64)] = []
        try db.run(
            "SELECT child, count, bytes FROM questionTally WHERE count > ? OR bytes > ?",
            [.int(Int64(limits.count)), .int(Int64(limits.bytes))]
        ) { r in over.append((r.text(0), r.int(1), r.int(2))) }
        guard !over.isEmpty else { return nil }
        let mark = questionTail.withLock { $0.indexedThrough }
        var rows: [Int64] = []
        // A bounded share each (a pass reads what it chooses); what is left comes in the next.
        let share = max(64, Self.forgetPassRows / over.count)
        for var child in over {
            var taken = 0
            // The oldest first, by first asking; pending ones stay.
            try db.run(
                dynamic: """
                    SELECT p.key, length(CAST(q.content AS BLOB)) FROM questionPlaces p JOIN questions q ON q.key = p.key \(Self.withState)
                    WHERE p.child = ? AND p.key <= ? AND \(Self.finished) ORDER BY p.createdAt, p.key
                    """, [.text(child.child), .int(mark)]
            ) { r in
                guard taken < share, child.count > limits.count || child.bytes > limits.bytes else { throw SQLiteDatabase.stop }
                taken += 1
                rows.append(r.int(0))
                child.count -= 1
                child.bytes -= r.int(1)
            }
        }
        return rows.isEmpty ? nil : rows.sorted()
    }

    /// Drops the entries of the lookup by id whose question is gone, the next `limit` of
    /// the table in order (from where the last sweep stopped, around again at its end).
    private func sweepQuestionIDs(limit: Int) throws {
        var stale: [(Int64, Int64)] = []
        var last: (Int64, Int64)?
        let from = sweptThrough ?? (.min, .min)
        try db.run(
            """
            SELECT i.high, i.low, q.key IS NULL FROM questionIDs i LEFT JOIN questions q ON q.key = i.key
            WHERE (i.high, i.low) > (?, ?) ORDER BY i.high, i.low LIMIT ?
            """, [.int(from.0), .int(from.1), .int(Int64(limit))]
        ) { r in
            last = (r.int(0), r.int(1))
            if r.int(2) != 0 { stale.append((r.int(0), r.int(1))) }
        }
        sweptThrough = last
        guard !stale.isEmpty else { return }
        try db.transaction {
            for (high, low) in stale { try db.run("DELETE FROM questionIDs WHERE high = ? AND low = ?", [.int(high), .int(low)]) }
        }
    }

    /// Drops the entries of the list of pending questions whose question is pending no
    /// longer (an answer leaves its entry), the next `limit` of the list in order (from where
    /// the last sweep stopped, around again at its end).
    private func sweepPendingList(limit: Int) throws {
        var done: [Int64] = []
        var (last, seen) = (pendingSweptThrough, 0)
        try db.run(
            dynamic: """
                SELECT p.key, q.key IS NULL OR \(Self.finished) FROM pendingQuestions p LEFT JOIN questions q ON q.key = p.key \(Self.withState)
                WHERE p.key > ? ORDER BY p.key LIMIT ?
                """, [.int(pendingSweptThrough), .int(Int64(limit))]
        ) { r in
            (last, seen) = (r.int(0), seen + 1)
            if r.int(1) != 0 { done.append(r.int(0)) }
        }
        pendingSweptThrough = seen < limit ? 0 : last
        for row in done { try db.run("DELETE FROM pendingQuestions WHERE key = ?", [.int(row)]) }
    }

    /// An id as the lookup table keys it: its 128 bits as two integers (SQLite's are signed:
    /// the same bits).
    static func idColumns(_ id: QuestionID) -> (high: Int64, low: Int64) {
        (Int64(bitPattern: id.high), Int64(bitPattern: id.low))
    }

    static func monotonicMillis() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}
