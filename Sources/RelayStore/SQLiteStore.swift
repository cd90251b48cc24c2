// The durable store: one SQLite database in WAL mode and two journal files. Changes are
// written in their compact binary form as the core makes them; a commit (once per loop
// turn) appends them to the current journal as one record — one small sequential
// write, where a database commit would rewrite every page the changes touch. Once
// enough have gathered, the journal's generation is handed to the table writer, which
// writes it into the tables in one transaction on its own thread (where many turns
// share pages and a question asked and answered in between is written once) while
// commits go on into the other journal. Until written, changes are served from memory,
// and at load the journals are folded into what the tables hold. Schema changes are
// numbered migrations recorded in the database itself (SQLiteSchema.swift).

import RelayProtocol

/// How hard a commit insists on the disk.
public enum SyncMode: String, Sendable, CaseIterable {
    /// WAL with synchronous=NORMAL: survives a killed process.
    case normal
    /// WAL with synchronous=FULL: also survives power loss.
    case full
}

public final class SQLiteStore: RelayStore {
    /// The loop's connection, for reading.
    let db: SQLiteDatabase
    let writer: TableWriter
    /// Generation g is written to journals[g % 2].
    private let journals: [JournalFile]
    /// The generation commits append to, and the newest the tables hold. Generation g
    /// may start (reusing the journal of g - 2) only once g - 2 is in the tables.
    private var generation: Int64 = 1
    private var appliedGeneration: Int64 = 0
    /// This turn's changes, not yet committed, as its journal record: each change is
    /// written there as it is saved (after room for the record's header).
    private var turn = ByteWriter(zeros: JournalFile.recordHeaderBytes)
    /// How many changes `turn` holds.
    private var turnCount = 0
    /// Where in `turn` the frame of the event recorded last lies: a question recorded after
    /// it refers to the copy of its content there instead of holding it again.
    private var lastEventFrame: Range<Int>?
    /// Journaled in the current generation, not yet handed to the writer.
    var backlog = Batch(generation: 1)
    /// Handed to the writer and not yet reported written.
    var sealed: Batch?
    /// A written batch's buffer, for the next backlog (its pages are already in memory).
    private var spare: [UInt8] = []
    /// A commit hands the backlog to the writer once it holds this many changes (and
    /// waits for the writer when eight times as many are waiting). Large, because the
    /// larger a batch the more of its questions are asked and answered inside it (one row
    /// write instead of two) and the more of its events are acknowledged before it is
    /// written (left out); the journal holds them durably meanwhile.
    public var checkpointThreshold = 32768
    /// The same, in bytes: a few large changes (questions with avatars) fill memory and the
    /// journal long before they are many.
    public var checkpointBytes = 64 << 20

    /// Whether the backlog holds `times` thresholds' worth of changes, by count or size.
    private func backlogHolds(_ times: Int) -> Bool {
        backlog.count >= times * checkpointThreshold || backlog.bytes.count >= times * checkpointBytes
    }

    /// Opens (creating if needed) the database at `path`, with its journals at
    /// `path-changes.0` and `.1`, and brings its schema up to date. A new database gets
    /// pages of `pageSize` bytes (an existing one keeps its own). `maxPageCount` caps the
    /// database's size at as many pages, and each journal's at as many 4 KiB pages (tests
    /// fill the "disk").
    public init(path: String, sync: SyncMode = .normal, pageSize: Int = 16384, maxPageCount: Int? = nil) throws {
        let writerDB = try SQLiteDatabase(path: path)
        try writerDB.exec("PRAGMA busy_timeout = 2000")
        // Large pages by default: the tables are written in large batches, and each page
        // costs the writer two system calls into the WAL and two more when checkpointed.
        try writerDB.exec("PRAGMA page_size = \(pageSize)")
        if let maxPageCount { _ = try writerDB.text("PRAGMA max_page_count = \(maxPageCount)") }
        let mode = try writerDB.text("PRAGMA journal_mode = WAL")
        guard mode?.lowercased() == "wal" else {
            throw SQLiteError(code: 1, message: "could not switch \(path) to WAL mode (got \(mode ?? "nothing"))")
        }
        try writerDB.exec("PRAGMA synchronous = \(sync == .full ? "FULL" : "NORMAL")")
        // Keep the working set in memory (64 MiB) and let the WAL grow to 32 MiB between
        // its own checkpoints, which then copy many writes of a page at once.
        try writerDB.exec("PRAGMA cache_size = -65536")
        let pageSize = try writerDB.scalar("PRAGMA page_size") ?? 4096
        try writerDB.exec("PRAGMA wal_autocheckpoint = \((32 << 20) / max(512, pageSize))")
        try Self.migrate(writerDB)
        db = try SQLiteDatabase(path: path)
        try db.exec("PRAGMA busy_timeout = 2000")
        try db.exec("PRAGMA cache_size = -16384")
        journals = try (0..<2).map {
            try JournalFile(path: "\(path)-changes.\($0)", syncEveryAppend: sync == .full, limitBytes: maxPageCount.map { $0 * 4096 })
        }
        writer = TableWriter(db: writerDB, sync: sync)
        try readJournals()
    }

    deinit { writer.stop() }

    /// The schema version this database is at.
    public func schemaVersion() throws -> Int {
        Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
    }

    private static func migrate(_ db: SQLiteDatabase) throws {
        try db.exec(
            "CREATE TABLE IF NOT EXISTS migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL)"
        )
        let current = Int(try db.scalar("SELECT max(version) FROM migrations") ?? 0)
        guard current <= migrations.count else {
            throw SQLiteError(
                code: 1,
                message:
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

    public func load() throws -> StoreSnapshot {
        _ = writer.takeOutcome(wait: true)  // whatever it was, the tables and journals are read afresh
        var s = StoreSnapshot()
        try db.run("SELECT id FROM families ORDER BY id") { r in s.families.append(r.text(0)) }
        try db.run("SELECT id, family, role, tokenHash, removed, limitsEnabled FROM members") { r in
            s.members.append(
                MemberRecord(
                    id: r.text(0), family: r.text(1), role: Role(rawValue: r.text(2)) ?? .child, tokenHash: r.blob(3),
                    removed: r.int(4) != 0, limitsEnabled: r.int(5) != 0))
        }
        try writer.exclusive { try $0.loadQuestions(into: &s) }
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
        try writer.exclusive { $0.learnSessions(s.sessions) }
        try db.run("SELECT member, head FROM heads") { r in s.heads[r.text(0)] = r.int(1) }
        // One index lookup per member: a GROUP BY over the events would read them all.
        for m in s.members {
            if let top = try db.scalar("SELECT max(lastSeq) FROM eventBatches WHERE member = ?", [.text(m.id)]) {
                s.heads[m.id] = max(s.heads[m.id] ?? 0, top)
            }
        }
        try readJournals()
        s.apply(try Change.decode(backlog.bytes))
        return s
    }

    /// Takes the journals' records the tables do not hold yet as the backlog, and goes on
    /// appending to the newest of those journals (or starts the next one).
    private func readJournals() throws {
        discardChanges()
        sealed = nil
        let applied = try db.scalar("SELECT value FROM settings WHERE key = 'journalGeneration'") ?? 0
        appliedGeneration = applied
        let unapplied = try journals.compactMap { try $0.read() }.filter { $0.generation > applied }
            .sorted { $0.generation < $1.generation }
        generation = unapplied.last?.generation ?? applied + 1
        backlog = Batch(generation: generation)
        for journal in unapplied {
            for record in journal.records {
                let count = try JournaledChange.readAll(record).count
                record.withUnsafeBufferPointer { backlog.append($0, count: count) }
            }
        }
        if unapplied.isEmpty { try journal(for: generation).startOver(generation: generation) }
    }

    private func journal(for generation: Int64) -> JournalFile { journals[Int(generation % 2)] }

    public func saveFamily(_ id: String) { record(.family(id)) }
    public func saveMember(_ member: MemberRecord) { record(.member(member)) }
    public func saveQuestion(_ question: QuestionRecord) {
        record { Change.write(question: question, contentIn: lastEventFrame, into: &$0) }
    }
    public func saveQuestionState(_ question: QuestionRecord) { record { Change.write(stateOf: question, into: &$0) } }
    public func deleteQuestion(_ question: QuestionRecord) {
        record { Change.write(forgetting: question.key, row: question.row, into: &$0) }
    }
    public func saveKnownHandle(_ known: KnownHandleRecord) { record(.known(known)) }
    public func deleteKnownHandle(child: String, handle: NormalizedHandle) { record(.unknown(child, handle)) }
    public func saveSession(_ session: SessionRecord) { record { Change.write(session: session, into: &$0) } }
    public func noteCursor(member: String, session: String, cursor: Int64) {
        writer.board.post(member: member, session: session, cursor: cursor)
    }
    public func deleteSessions(member: String) {
        writer.board.forget(member: member)
        record(.dropSessions(member))
    }
    public func deleteSession(member: String, name: String) {
        writer.board.forget(member: member, session: name)
        record(.dropSession(member, name))
    }
    public func appendEvent(_ event: EventRecord) {
        record { Change.write(event: event, into: &$0) }
        lastEventFrame = (turn.count - event.frame.count)..<turn.count  // the frame is written last
    }

    private func record(_ change: Change) { record { change.write(into: &$0) } }

    /// Records a change written by `write` (tests write old forms of changes with it).
    func record(_ write: (inout ByteWriter) -> Void) {
        write(&turn)
        turnCount += 1
    }

    public var hasChanges: Bool { turnCount > 0 }

    /// Calls `body` with this turn's changes, as they are journaled.
    func withTurnBytes<R>(_ body: (UnsafeBufferPointer<UInt8>) throws -> R) rethrows -> R {
        try turn.withBytes { try body(UnsafeBufferPointer(rebasing: $0[JournalFile.recordHeaderBytes...])) }
    }

    /// Appends the changes to the journal; a backlog that reaches the threshold with them
    /// goes to the writer. (If that hand-over fails, the changes are committed all the same:
    /// the error says the store needs attention, and the backlog stays in memory.)
    public func commit() throws {
        guard turnCount > 0 else { return }
        defer { discardChanges() }
        if sealed != nil && backlogHolds(8) { try settle(wait: true) }
        try settle(wait: false)
        // A backlog that still holds the generation before (a batch the writer could not
        // take) is written here and now: its journal cannot be started over yet.
        if sealed == nil && backlogHolds(1) && appliedGeneration < generation - 1 {
            try checkpoint()
        }
        try startNextGenerationIfWritten()
        try turn.withMutableBytes { try journal(for: generation).append(record: $0) }
        withTurnBytes { backlog.append($0, count: turnCount) }
        if sealed == nil && backlogHolds(1) && appliedGeneration >= generation - 1 {
            try handOver()
        }
    }

    public func discardChanges() {
        // A busy turn's record can pass a mebibyte (at (100, 8) a median of about 400 KB,
        // more with avatars); only a rare huge commit's buffer is let go.
        turn.truncate(to: JournalFile.recordHeaderBytes, shrinkingAbove: 8 << 20)
        turnCount = 0
        lastEventFrame = nil
    }

    /// Hands the backlog to the writer and starts the next generation in the other journal.
    private func handOver() throws {
        let batch = backlog
        try startNextGeneration()
        sealed = batch
        writer.submit(batch)
    }

    /// Takes the writer's outcome: a written batch is dropped from memory; a batch that
    /// could not be written goes back in front of the backlog, to be written with it (a
    /// batch may span generations), and the error is thrown.
    func settle(wait: Bool) throws {
        guard sealed != nil, let outcome = writer.takeOutcome(wait: wait), let batch = sealed.take() else { return }
        switch outcome {
        case .success(let written):
            appliedGeneration = written
            spare = batch.bytes
        case .failure(let error):
            var merged = batch
            backlog.bytes.withUnsafeBufferPointer { merged.append($0, count: backlog.count) }
            merged.generation = backlog.generation
            backlog = merged
            throw error
        }
    }

    public func checkpoint() throws {
        try settle(wait: true)
        if backlog.count > 0 {
            let batch = backlog
            try writer.exclusive { try $0.write(batch) }
            appliedGeneration = batch.generation
        }
        try startNextGenerationIfWritten()
    }

    /// Nothing may be appended to a generation once it is in the tables: the next starts.
    private func startNextGenerationIfWritten() throws {
        if appliedGeneration >= generation { try startNextGeneration() }
    }

    /// Starts generation + 1 in the journal of generation - 1, with an empty backlog.
    private func startNextGeneration() throws {
        precondition(appliedGeneration >= generation - 1, "the journal of generation \(generation - 1) is still needed")
        try journal(for: generation + 1).startOver(generation: generation + 1)
        generation += 1
        let outgoing = backlog.bytes.count
        spare.removeAll(keepingCapacity: true)
        // A backlog that outgrows its buffer is copied whole into one twice the size (tens of
        // megabytes: the loop held every client up for up to 10 ms), and one grows past the
        // threshold whenever the writer is still busy with the batch before. So there is room
        // for twice the generation before. A buffer too short for that is not grown to fit,
        // but to twice that: every page of a new buffer is a page fault as the journal reaches
        // it, and buffers grown a little at a time moved at one generation in six at (100, 8)
        // (the relay faulted about a seventh more). Only the pages written are ever taken.
        if spare.capacity < 2 * outgoing { spare.reserveCapacity(4 * outgoing) }
        backlog = Batch(bytes: spare, generation: generation)
        spare = []
    }

    /// Whether the table writer has had to find questions by id, for changes journaled
    /// without rows (for tests).
    var hasFoundQuestionsByID: Bool { (try? writer.exclusive { $0.hasFoundQuestionsByID }) ?? false }
    /// Changes journaled and not yet in the tables (for tests).
    var journaledChanges: Int { backlog.count + (sealed?.count ?? 0) }
    /// The journal commits append to (for tests).
    var currentJournalPath: String { journal(for: generation).path }
}
