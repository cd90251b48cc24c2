// The SQLite store's schema, one numbered step per version. Never edit a step that has
// shipped; add one.

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
                try db.run("SELECT member, seq, at, topic, frame FROM events ORDER BY member, seq") { r in
                    let e = EventRecord(
                        member: r.text(0), seq: r.int(1), at: Timestamp(milliseconds: r.int(2)),
                        topic: r.isNull(3) ? nil : TopicKind(rawValue: r.text(3)), frame: r.blob(4))
                    if let first = group.first, first.member != e.member || group.count == 256 {
                        try insertBatch(db, member: first.member, group[...])
                        group.removeAll()
                    }
                    group.append(e)
                }
                if let first = group.first { try insertBatch(db, member: first.member, group[...]) }
                try db.exec("DROP TABLE events")
            }
        ),
    ]
}
