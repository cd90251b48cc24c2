// The SQLite store's schema, one numbered step per version. Never edit a step that has
// shipped; add one.

import RelayModel
import RelayProtocol

extension SQLiteStore {
    typealias Migration = (name: String, sql: String, convert: (@Sendable (SQLiteDatabase) throws -> Void)?)

    static let migrations: [Migration] = [
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
            """,
            nil
        ),
        (
            "journal generation",
            "CREATE TABLE settings(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;",
            nil
        ),
        (
            "events in batches, questions in order of asking",
            """
            CREATE TABLE eventBatches(id INTEGER PRIMARY KEY, member TEXT NOT NULL, firstSeq INTEGER NOT NULL,
                lastSeq INTEGER NOT NULL, firstAt INTEGER NOT NULL, lastAt INTEGER NOT NULL, count INTEGER NOT NULL,
                events BLOB NOT NULL);
            CREATE INDEX eventBatchesByMember ON eventBatches(member, lastSeq);
            CREATE INDEX eventBatchesByAge ON eventBatches(firstAt);
            CREATE TABLE questionsInOrder(key INTEGER PRIMARY KEY, id TEXT NOT NULL, child TEXT NOT NULL,
                family TEXT NOT NULL, status TEXT NOT NULL, attempt INTEGER NOT NULL, createdAt INTEGER NOT NULL,
                content TEXT NOT NULL, outcome TEXT);
            INSERT INTO questionsInOrder(id, child, family, status, attempt, createdAt, content, outcome)
                SELECT id, child, family, status, attempt, createdAt, content, outcome FROM questions ORDER BY createdAt;
            DROP TABLE questions;
            ALTER TABLE questionsInOrder RENAME TO questions;
            """,
            { db in
                // Each member's stored events become batches of up to 256.
                var group: [EventRecord] = []
                func insert() throws {
                    guard let first = group.first, let last = group.last else { return }
                    try db.run(
                        "INSERT INTO eventBatches(member, firstSeq, lastSeq, firstAt, lastAt, count, events) VALUES(?,?,?,?,?,?,?)",
                        [
                            .text(first.member), .int(first.seq), .int(last.seq), .int(first.at.milliseconds),
                            .int(group.map(\.at.milliseconds).max() ?? 0), .int(Int64(group.count)),
                            .blob(EventBatch.encode(group[...])),
                        ])
                    group.removeAll()
                }
                try db.run("SELECT member, seq, at, topic, frame FROM events ORDER BY member, seq") { r in
                    let e = EventRecord(
                        member: r.text(0), seq: r.int(1), at: Timestamp(milliseconds: r.int(2)),
                        topic: r.isNull(3) ? nil : TopicKind(rawValue: r.text(3)), frame: r.blob(4))
                    if let first = group.first, first.member != e.member || group.count == 256 { try insert() }
                    group.append(e)
                }
                try insert()
                try db.exec("DROP TABLE events")
            }
        ),
        (
            // SQLite became the only store. A row holds the events one commit appended to one
            // member's stream, as the frames sent (wire contract §1: each a 4-byte big-endian
            // length and its JSON) and a JSON array of their topic kinds (null for none).
            // Rows are in order of appending, and so of time (an event is never stamped
            // before the one before it): the oldest are the first rows.
            "events of a commit in one row per member, in order of appending",
            """
            CREATE TABLE events(id INTEGER PRIMARY KEY, member TEXT NOT NULL, firstSeq INTEGER NOT NULL,
                lastSeq INTEGER NOT NULL, at INTEGER NOT NULL, topics TEXT NOT NULL, frames BLOB NOT NULL);
            CREATE UNIQUE INDEX eventsBySeq ON events(member, lastSeq);
            INSERT OR IGNORE INTO settings(key, value) SELECT 'lastQuestionRow', coalesce(max(key), 0) FROM questions;
            """,
            { db in
                var events: [EventRecord] = []
                try db.run("SELECT member, events FROM eventBatches ORDER BY member, firstSeq") { r in
                    var latest = events.last.flatMap { $0.member == r.text(0) ? $0.at : nil }
                    for var e in try EventBatch.decode(r.blob(1), member: r.text(0)) {
                        // An event is never stamped before the one before it (a clock set back).
                        e.at = max(e.at, latest ?? e.at)
                        latest = e.at
                        events.append(e)
                    }
                }
                events.sort { ($0.at, $0.member, $0.seq) < ($1.at, $1.member, $1.seq) }
                // In rows of a few hundred events at most, as commits would have made them.
                for start in stride(from: 0, to: events.count, by: 256) {
                    try SQLiteStore.insert(Array(events[start..<min(start + 256, events.count)]), into: db, firstID: nil) {
                        try SQLiteStore.storedHead(of: $0, in: db)
                    }
                }
                try db.exec("DROP TABLE eventBatches")
            }
        ),
        (
            "members bound to Unix accounts",
            """
            ALTER TABLE members ADD COLUMN unixUID INTEGER;
            CREATE UNIQUE INDEX membersByUnixUID ON members(unixUID) WHERE unixUID IS NOT NULL;
            """,
            nil
        ),
        (
            // New rows stay out of the index until a pruning step finds that they must stay
            // (see SQLiteStore+Events.swift); the rows there are now are all in it.
            "events indexed only once they must stay",
            """
            ALTER TABLE events ADD COLUMN indexed INTEGER NOT NULL DEFAULT 1;
            DROP INDEX eventsBySeq;
            CREATE UNIQUE INDEX eventsBySeq ON events(member, lastSeq) WHERE indexed;
            INSERT OR REPLACE INTO settings(key, value) SELECT 'indexedThroughRow', coalesce(max(id), 0) FROM events;
            """,
            nil
        ),
        (
            // Messages for a family hub, kept until the hub has stored them (Core+Hub.swift).
            "an outbox for the family hub",
            """
            CREATE TABLE hubOutbox(id INTEGER PRIMARY KEY, family TEXT NOT NULL, subject TEXT NOT NULL,
                messageID TEXT NOT NULL, body BLOB NOT NULL, firstOnSubject INTEGER NOT NULL);
            """,
            nil
        ),
        (
            // Finished questions stay in the store only (QuestionArchive): read by id, by
            // child in list order, and the pending ones at start. The id and child lookups
            // are tables of their own, filled in bulk (SQLiteStore+Questions.swift): an index
            // on client-chosen ids, kept up at every commit, wrote a page of it per question
            // asked. Each child's count and bytes are tallied as rows change, so that its
            // oldest finished questions can be forgotten without counting them.
            "finished questions read back on demand",
            """
            CREATE INDEX questionsPending ON questions(key) WHERE status = 'pending';
            CREATE TABLE questionIDs(high INTEGER NOT NULL, low INTEGER NOT NULL, key INTEGER NOT NULL,
                PRIMARY KEY(high, low)) WITHOUT ROWID;
            CREATE TABLE questionPlaces(child TEXT NOT NULL, createdAt INTEGER NOT NULL, key INTEGER NOT NULL,
                PRIMARY KEY(child, createdAt, key)) WITHOUT ROWID;
            INSERT INTO questionPlaces(child, createdAt, key) SELECT child, createdAt, key FROM questions;
            INSERT OR REPLACE INTO settings(key, value) SELECT 'questionsIndexedThrough', coalesce(max(key), 0) FROM questions;
            CREATE TABLE questionTally(child TEXT PRIMARY KEY, count INTEGER NOT NULL, bytes INTEGER NOT NULL) WITHOUT ROWID;
            INSERT INTO questionTally(child, count, bytes)
                SELECT child, count(*), sum(length(CAST(content AS BLOB))) FROM questions GROUP BY child;
            CREATE TRIGGER questionInserted AFTER INSERT ON questions BEGIN
                INSERT INTO questionTally(child, count, bytes) VALUES(new.child, 1, length(CAST(new.content AS BLOB)))
                    ON CONFLICT(child) DO UPDATE SET count = count + 1, bytes = bytes + excluded.bytes;
            END;
            CREATE TRIGGER questionDeleted AFTER DELETE ON questions BEGIN
                UPDATE questionTally SET count = count - 1, bytes = bytes - length(CAST(old.content AS BLOB))
                    WHERE child = old.child;
                DELETE FROM questionPlaces WHERE child = old.child AND createdAt = old.createdAt AND key = old.key;
            END;
            CREATE TRIGGER questionContentChanged AFTER UPDATE OF content ON questions BEGIN
                UPDATE questionTally SET bytes = bytes + length(CAST(new.content AS BLOB)) - length(CAST(old.content AS BLOB))
                    WHERE child = new.child;
            END;
            CREATE TRIGGER questionAskedAnew AFTER UPDATE OF createdAt ON questions WHEN new.createdAt != old.createdAt BEGIN
                UPDATE questionPlaces SET createdAt = new.createdAt
                    WHERE child = old.child AND createdAt = old.createdAt AND key = old.key;
            END;
            """,
            { db in
                var ids: [(Int64, Int64, Int64)] = []
                try db.run("SELECT id, key FROM questions ORDER BY key") { r in
                    guard let id = QuestionID(r.text(0)).map(SQLiteStore.idColumns) else { return }
                    ids.append((id.high, id.low, r.int(1)))
                }
                for (high, low, key) in ids {
                    try db.run("INSERT OR REPLACE INTO questionIDs(high, low, key) VALUES(?, ?, ?)", [.int(high), .int(low), .int(key)])
                }
            }
        ),
        (
            // Known handles under rows the core gives in order (KnownHandleRecord.row): a
            // table keyed by child wrote a page of it for each handle an answer made known.
            // The core keeps them all in memory and one row per handle (`check` says so).
            "known handles in order of becoming known",
            """
            CREATE TABLE knownHandlesInOrder(row INTEGER PRIMARY KEY, child TEXT NOT NULL, kind TEXT NOT NULL,
                value TEXT NOT NULL, permanent INTEGER NOT NULL, until INTEGER, actions TEXT NOT NULL);
            INSERT INTO knownHandlesInOrder(child, kind, value, permanent, until, actions)
                SELECT child, kind, value, permanent, until, actions FROM knownHandles;
            DROP TABLE knownHandles;
            ALTER TABLE knownHandlesInOrder RENAME TO knownHandles;
            """,
            nil
        ),
        (
            // The rows that must stay are listed in a table of their own, filled by the
            // pruning steps: marking them in the rows themselves wrote every kept row (and
            // its page) a second time.
            "the events index a table of its own",
            """
            CREATE TABLE eventIndex(member TEXT NOT NULL, lastSeq INTEGER NOT NULL, id INTEGER NOT NULL,
                PRIMARY KEY(member, lastSeq)) WITHOUT ROWID;
            INSERT INTO eventIndex(member, lastSeq, id) SELECT member, lastSeq, id FROM events WHERE indexed;
            DROP INDEX eventsBySeq;
            ALTER TABLE events DROP COLUMN indexed;
            """,
            nil
        ),
        (
            // A pending question's row held room for its outcome, let go when it was answered:
            // a row that grew in place split its page, and left the rows after it on pages a
            // third empty. (Since the states of questions have rows of their own, a question's
            // row no longer grows, and new rows keep no room.)
            "room in a pending question's row for its outcome",
            "ALTER TABLE questions ADD COLUMN reserved BLOB;",
            nil
        ),
        (
            // The pending questions up to the lookup tables' mark are listed in a table of
            // their own, filled by the indexing passes (SQLiteStore+Questions.swift); those
            // above it are found among the rows above it. An index of the pending questions
            // wrote a page of it at every ask and every answer. An answer leaves its entry,
            // for a sweep to drop: the list may name questions no longer pending.
            "pending questions listed by the indexing passes",
            """
            CREATE TABLE pendingQuestions(key INTEGER PRIMARY KEY);
            INSERT INTO pendingQuestions(key) SELECT key FROM questions WHERE status = 'pending';
            DROP INDEX questionsPending;
            """,
            nil
        ),
        (
            // A question's state once it changes (answered, cancelled, expired) is a row of
            // its own, under the question's key: rewriting the question's row at its answer
            // wrote, under load, a page of the questions for every few answers. Reads take
            // the state's row where there is one (SQLiteStore.questionColumns). A question
            // written anew (asked again) drops it, as does forgetting the question.
            "the states of questions in rows of their own",
            """
            CREATE TABLE questionStates(key INTEGER PRIMARY KEY, status TEXT NOT NULL, attempt INTEGER NOT NULL, outcome TEXT);
            CREATE TRIGGER questionStateForgotten AFTER DELETE ON questions BEGIN
                DELETE FROM questionStates WHERE key = old.key;
            END;
            CREATE TRIGGER questionWrittenAnew AFTER UPDATE ON questions BEGIN
                DELETE FROM questionStates WHERE key = new.key;
            END;
            """,
            nil
        ),
        (
            // Rows that stay wait, listed in memory, for a round that adds them to the events
            // index member by member (SQLiteStore+Events.swift); while one runs, rows above
            // the mark may be in the index already. A relay before this step would index
            // them again, and fail: the version keeps it from opening the database.
            "the events index filled in rounds",
            "",
            nil
        ),
        (
            // How far a session has acknowledged, where it is not its cursor (NULL): a session
            // that starts at the head has acknowledged none of the events before it (§6).
            "sessions' acknowledged events",
            "ALTER TABLE sessions ADD COLUMN acknowledged INTEGER;",
            nil
        ),
        (
            // Where a restore made a stream jump (SQLiteStore+Maintenance.swift): the seqs
            // after `through` up to `head` were given before the restore, or never.
            "restore points",
            """
            CREATE TABLE restorePoints(member TEXT NOT NULL, through INTEGER NOT NULL, head INTEGER NOT NULL,
                PRIMARY KEY(member, through)) WITHOUT ROWID;
            """,
            nil
        ),
    ]
}
