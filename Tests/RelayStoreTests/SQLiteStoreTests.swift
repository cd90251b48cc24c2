// The SQLite store on disk: older schemas and the journals of older relays are brought
// in without loss, a damaged or emptied store is refused with what to do, a full disk
// fails a commit whole and is survived, a seq is never stored twice, and backup,
// restore and check do what they say.

import CSQLite
import Foundation
import RelayModel
import RelayProtocol
@testable import RelayStore
import Synchronization
import XCTest

final class SQLiteStoreTests: XCTestCase {
    private var dir: URL!

    override func setUp() {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("sqlite-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(at: dir) }

    private var path: String { dir.appendingPathComponent("relay.db").path }

    /// Event `seq`'s frame as an SQL blob literal, for stores written by hand at old schemas.
    private func frameLiteral(_ seq: Int64) -> String {
        "x'" + StoreContractTests.frame(seq).map { String(format: "%02x", $0) }.joined() + "'"
    }

    private func exec(_ sql: String, at path: String? = nil) {
        var db: OpaquePointer?
        XCTAssertEqual(sqlite3_open(path ?? self.path, &db), SQLITE_OK)
        XCTAssertEqual(sqlite3_exec(db, sql, nil, nil, nil), SQLITE_OK, String(cString: sqlite3_errmsg(db)))
        sqlite3_close(db)
    }

    func testMigrationsAreRecordedAndANewerSchemaIsRefused() throws {
        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.schemaVersion(), SQLiteStore.migrations.count)
        _ = try SQLiteStore(path: path)  // reopening migrates nothing
        exec("INSERT INTO migrations VALUES(99, 'future', 0)")
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertTrue("\(error)".contains("newer than this relay knows"), "\(error)")
        }
        // Not damage, for check either: it says which relay can check it.
        XCTAssertThrowsError(try SQLiteStore.check(databaseAt: path)) { error in
            XCTAssertTrue(
                "\(error)".contains("newer than this relay knows (\(SQLiteStore.migrations.count)); check it with a newer relay"),
                "\(error)")
        }
        exec("DELETE FROM migrations WHERE version >= \(SQLiteStore.migrations.count)")
        XCTAssertThrowsError(try SQLiteStore.check(databaseAt: path)) { error in
            XCTAssertTrue("\(error)".contains("an older relay's: check it with that relay, or upgrade a copy"), "\(error)")
        }
    }

    func testASchemaTwoDatabaseIsConverted() throws {
        let old = SQLiteStore.migrations.prefix(2).map(\.sql).joined(separator: "\n")
        let q = try StoreContractTests.question(row: 9)
        let content = String(decoding: q.content.encoded, as: UTF8.self).replacingOccurrences(of: "'", with: "''")
        var sql = """
            CREATE TABLE migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL);
            \(old)
            INSERT INTO migrations VALUES(1, 'initial schema', 0), (2, 'journal generation', 0);
            INSERT INTO families VALUES('fam');
            INSERT INTO members VALUES('g1', 'fam', 'guardian', x'00', 0, 1), ('c1', 'fam', 'child', x'00', 0, 1);
            INSERT INTO questions VALUES('\(q.id)', 'c1', 'fam', 'pending', 1, 9, '\(content)', NULL);
            """
        // g1's clock went back at seq 200: its events stay in order of time all the same.
        for seq in Int64(1)...300 {
            sql += "INSERT INTO events VALUES('g1', \(seq), \(seq < 200 ? seq : seq - 150), NULL, \(frameLiteral(seq)));\n"
        }
        sql += "INSERT INTO events VALUES('c1', 1, 5, 'communication', \(frameLiteral(1)));"
        exec(sql)

        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.schemaVersion(), SQLiteStore.migrations.count)
        var s = try store.load()
        XCTAssertEqual(s.questions, [q])
        XCTAssertEqual(s.questions.first?.row, 1)
        XCTAssertEqual(s.heads, ["g1": 300, "c1": 1])
        let events = try store.events(member: "g1", after: 0, limit: 1000)
        XCTAssertEqual(events.map(\.seq), Array(1...300))
        XCTAssertEqual(events.last?.frame, StoreContractTests.frame(300))
        XCTAssertEqual(events.map(\.at), events.map(\.at).sorted(), "never stamped before the event before")
        XCTAssertEqual(try store.events(member: "c1", after: 0, limit: 10).first?.topic, .communication)
        // The converted question is updated in place, by the row it was loaded with.
        var answered = s.questions[0]
        answered.status = .answered
        answered.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 10))
        let next = try StoreContractTests.question(row: s.lastQuestionRow + 1)
        try store.commit([.questionState(answered), .question(next)])
        s = try SQLiteStore(path: path).load(allQuestions: true)
        XCTAssertEqual(s.questions, [answered, next])
        XCTAssertEqual(try store.load().questions, [next], "only what is live loads")
        XCTAssertEqual(try store.question(answered.key), answered)
    }

    /// A store written at schema 8 (events marked indexed in their rows, known handles by
    /// child): its events stay readable whether indexed or not, pruning and `check` work on
    /// the index table, and its handles keep their fields under rows of their own.
    func testASchemaEightDatabaseIsConverted() throws {
        // Steps 1–8 as they ran on an empty store (the tables steps 3 and 4 convert and drop, dropped).
        let dropped = [2: "DROP TABLE events;", 3: "DROP TABLE eventBatches;"]
        let old = SQLiteStore.migrations.prefix(8).enumerated().map { $0.element.sql + "\n" + (dropped[$0.offset] ?? "") }
            .joined(separator: "\n")
        let versions = SQLiteStore.migrations.prefix(8).enumerated().map { "(\($0.offset + 1), 'step', 0)" }
        var sql = """
            CREATE TABLE migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL);
            \(old)
            INSERT INTO migrations VALUES\(versions.joined(separator: ","));
            INSERT INTO families VALUES('fam');
            INSERT INTO members(id, family, role, tokenHash, removed, limitsEnabled)
                VALUES('g1', 'fam', 'guardian', x'00', 0, 1), ('c1', 'fam', 'child', x'00', 0, 1);
            INSERT INTO sessions VALUES('g1', 'tab', 0, '');
            INSERT INTO knownHandles VALUES('c1', 'phoneNumber', '+15550001', 1, NULL, '["message"]'),
                ('c1', 'emailAddress', 'kim@example.com', 0, 99000, '[]');
            INSERT OR REPLACE INTO settings(key, value) VALUES('indexedThroughRow', 3);

            """
        // Rows 1–3 in the index (below the mark), 4–5 above it, outside.
        for seq in Int64(1)...5 {
            sql += "INSERT INTO events(id, member, firstSeq, lastSeq, at, topics, frames, indexed) "
            sql += "VALUES(\(seq), 'g1', \(seq), \(seq), \(seq), '[null]', \(frameLiteral(seq)), \(seq <= 3 ? 1 : 0));\n"
        }
        exec(sql)

        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.schemaVersion(), SQLiteStore.migrations.count)
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3, 4, 5])
        XCTAssertEqual(try store.events(member: "g1", after: 4, limit: 10).last?.frame, StoreContractTests.frame(5))
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        let handles = try store.load().knownHandles.sorted { $0.row < $1.row }
        XCTAssertEqual(handles.map(\.row), [1, 2])
        XCTAssertEqual(
            handles.map { "\($0.handle.value) \($0.permanent) \($0.until?.milliseconds ?? -1) \($0.actions)" }.sorted(),
            ["+15550001 true -1 [\"message\"]", "kim@example.com false 99000 []"])
        // Acknowledged up to 2: the indexed rows 1–2 go (with their index entries), 3–5 stay.
        try store.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 2, topics: []))])
        _ = try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 2], settledThrough: StoreContractTests.later, limit: 10)
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [3, 4, 5])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        XCTAssertEqual(try SQLiteStore(path: path).events(member: "g1", after: 0, limit: 10).map(\.seq), [3, 4, 5], "after a restart")
    }

    /// A data directory written by the relay that kept journals (killed while they held
    /// what the tables did not: generation 2 in `-changes.0`, generation 1 already in the
    /// tables): every change comes in, and the journals go.
    func testTheJournalsOfAnOlderRelayAreFoldedInAndRemoved() throws {
        let fixture = try XCTUnwrap(Bundle.module.url(forResource: "Fixtures/journaled-store", withExtension: nil))
        for file in ["relay.db", "relay.db-changes.0", "relay.db-changes.1"] {
            try FileManager.default.copyItem(at: fixture.appendingPathComponent(file), to: dir.appendingPathComponent(file))
        }
        let store = try SQLiteStore(path: path)
        for n in 0..<2 { XCTAssertFalse(FileManager.default.fileExists(atPath: "\(path)-changes.\(n)"), "journal \(n) removed") }
        let s = try store.load(allQuestions: true)
        XCTAssertEqual(try store.load().questions.map(\.row), [3, 5], "only what is live loads")
        XCTAssertEqual(s.families, ["smiths"])
        XCTAssertEqual(Set(s.members.map(\.id)), ["gwen", "alex", "kim"])
        XCTAssertEqual(s.members.first { $0.id == "kim" }?.limitsEnabled, false)
        let status = Dictionary(uniqueKeysWithValues: s.questions.map { ($0.id.suffix(1), $0.status) })
        XCTAssertEqual(status, ["1": .answered, "2": .cancelled, "3": .pending, "4": .answered, "5": .pending])
        XCTAssertEqual(s.questions.map(\.row), [1, 2, 3, 4, 5], "rows in order of asking")
        XCTAssertEqual(s.questions.first { $0.id.hasSuffix("4") }?.outcome?.choice.id, "decline")
        XCTAssertEqual(s.heads, ["gwen": 8, "alex": 4, "kim": 1])
        XCTAssertEqual(try store.events(member: "gwen", after: 0, limit: 100).map(\.seq), Array(1...8))
        XCTAssertEqual(try store.events(member: "alex", after: 0, limit: 100).map(\.seq), Array(1...4))
        XCTAssertEqual(s.knownHandles.map(\.handle.value), ["+15550000001"], "the approval of question 1")
        XCTAssertEqual(Set(s.sessions.map(\.name)), ["laptop", "tablet"])
        XCTAssertTrue(try SQLiteStore.check(databaseAt: path).isEmpty)
        XCTAssertEqual(try SQLiteStore(path: path).load(allQuestions: true), s, "opened again, the same")
    }

    func testAJournalWithADamagedHeaderStopsTheStart() throws {
        let fixture = try XCTUnwrap(Bundle.module.url(forResource: "Fixtures/journaled-store", withExtension: nil))
        for file in ["relay.db", "relay.db-changes.0", "relay.db-changes.1"] {
            try FileManager.default.copyItem(at: fixture.appendingPathComponent(file), to: dir.appendingPathComponent(file))
        }
        let journal = dir.appendingPathComponent("relay.db-changes.0")
        var bytes = try Data(contentsOf: journal)
        bytes[2] ^= 0xFF
        try bytes.write(to: journal)
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertTrue("\(error)".contains("relay.db-changes.0 is damaged"), "\(error)")
        }
        XCTAssertTrue(FileManager.default.fileExists(atPath: journal.path), "nothing is removed")
    }

    func testAnEmptiedDatabaseBesideJournalsIsRefused() throws {
        XCTAssertTrue(FileManager.default.createFile(atPath: path, contents: Data()))
        XCTAssertTrue(FileManager.default.createFile(atPath: path + "-changes.0", contents: Data("PRJOURN3".utf8)))
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertTrue("\(error)".contains("the database was lost"), "\(error)")
        }
    }

    func testADamagedDatabaseIsRefusedAsDamaged() throws {
        let store = try SQLiteStore(path: path)
        try store.commit(StoreContractTests.turns()[0])
        try store.checkpoint()
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        for i in 0..<16 { bytes[i] ^= 0x5A }  // the header
        try bytes.write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try SQLiteStore(path: path).load()) { error in
            XCTAssertTrue((error as? SQLiteError)?.isDamaged == true, "\(error)")
        }
    }

    func testASeqIsNeverStoredTwiceNorOutOfOrder() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.event(StoreContractTests.event("g1", 1)), .event(StoreContractTests.event("g1", 2))])
        for wrong in [[Int64(2)], [1], [3, 5]] {
            XCTAssertThrowsError(try store.commit([.family("f")] + wrong.map { .event(StoreContractTests.event("g1", $0)) }), "\(wrong)")
        }
        XCTAssertEqual(try store.load().families, [], "the failed commits kept nothing")
        try store.commit([.event(StoreContractTests.event("g1", 3))])
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3])
    }

    /// A row cut short, or a frame changed in place (its length kept: every frame is JSON,
    /// §1), is found by check and never read as events.
    func testARowWhoseFramesAreDamagedIsFoundByCheckAndRefusedOnReading() throws {
        let damages = [
            "UPDATE events SET frames = substr(frames, 1, length(frames) - 3)",
            "UPDATE events SET frames = replace(frames, CAST('\"seq\":2' AS BLOB), CAST('\"seq\"\u{01}2' AS BLOB))",
        ]
        for (n, damage) in damages.enumerated() {
            let path = dir.appendingPathComponent("damaged\(n).db").path
            let store = try SQLiteStore(path: path)
            try store.commit([.event(StoreContractTests.event("g1", 1)), .event(StoreContractTests.event("g1", 2))])
            exec(damage, at: path)
            XCTAssertThrowsError(try store.events(member: "g1", after: 0, limit: 10), damage) { error in
                XCTAssertTrue((error as? SQLiteError)?.isDamaged == true, "\(error)")
            }
            XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["the stored events 1…2 of g1 cannot be read"], damage)
        }
    }

    /// The database, its WAL and the WAL's index as a relay killed now leaves them, copied
    /// to `crashed` (the index is shared memory, read through its file).
    private func crashImage(of store: SQLiteStore, adding members: Int) throws -> String {
        for i in 0..<members {
            try store.commit([
                .member(MemberRecord(id: "m\(i)", family: "fam", role: .guardian, tokenHash: [UInt8](repeating: 7, count: 500)))
            ])
        }
        let crashed = dir.appendingPathComponent("crashed").path
        try FileManager.default.createDirectory(atPath: crashed, withIntermediateDirectories: true)
        for suffix in ["", "-wal", "-shm"] {
            try FileManager.default.copyItem(atPath: path + suffix, toPath: crashed + "/relay.db" + suffix)
        }
        return crashed + "/relay.db"
    }

    /// After a crash SQLite keeps what its WAL holds up to a damaged frame, and takes a
    /// missing WAL for an empty one: the relay refuses both, saying which file and what to
    /// do, as `check` does, and starts on an intact image with everything in it.
    func testAWALThatLostCommitsItsIndexSaysItHeldIsRefused() throws {
        let store = try SQLiteStore(path: path)
        let intact = try crashImage(of: store, adding: 40)
        let damaged = dir.appendingPathComponent("damaged").path, missing = dir.appendingPathComponent("missing").path
        let foreign = dir.appendingPathComponent("foreign").path
        for copy in [damaged, missing, foreign] {
            try FileManager.default.copyItem(atPath: URL(fileURLWithPath: intact).deletingLastPathComponent().path, toPath: copy)
        }
        // A byte of the page of the tenth frame from the end (4 KiB pages, after a 32-byte header).
        let wal = try FileHandle(forUpdating: URL(fileURLWithPath: damaged + "/relay.db-wal"))
        let frames = (try wal.seekToEnd() - 32) / (24 + 4096)
        let at = 32 + (frames - 10) * (24 + 4096) + 24 + 100
        try wal.seek(toOffset: at)
        let byte = try XCTUnwrap(try wal.read(upToCount: 1))
        try wal.seek(toOffset: at)
        try wal.write(contentsOf: Data([byte[0] ^ 0xFF]))
        try wal.close()
        try FileManager.default.removeItem(atPath: missing + "/relay.db-wal")
        // Another store's WAL in its place (SQLite would replay it, were the index gone).
        let other = try SQLiteStore(path: dir.appendingPathComponent("other.db").path)
        try other.commit([.family("elsewhere")])
        try FileManager.default.removeItem(atPath: foreign + "/relay.db-wal")
        try FileManager.default.copyItem(atPath: dir.appendingPathComponent("other.db-wal").path, toPath: foreign + "/relay.db-wal")

        let cases = [
            (damaged, "relay.db-wal is damaged: SQLite can read only"), (missing, "relay.db-wal is missing, but"),
            (foreign, "relay.db-wal is not the WAL"),
        ]
        for (copy, says) in cases {
            XCTAssertThrowsError(try SQLiteStore(path: copy + "/relay.db")) { error in
                XCTAssertTrue("\(error)".contains(says) && "\(error)".contains("permission-relay restore"), "\(error)")
            }
            let findings = try SQLiteStore.check(databaseAt: copy + "/relay.db")
            XCTAssertEqual(findings.count, 1)
            XCTAssertTrue(findings.first?.contains(says) == true, "\(findings)")
        }
        // The evidence stays until the operator acts: a second start is refused too.
        XCTAssertThrowsError(try SQLiteStore(path: damaged + "/relay.db"))
        let reopened = try SQLiteStore(path: intact)
        XCTAssertEqual(try reopened.load().members.count, 40)
    }

    /// An emptied or missing database beside a WAL with frames is a lost database, not a
    /// new store (SQLite would delete the WAL, and the next start would serve an empty
    /// store): start, check and backup refuse it, every time.
    func testAnEmptiedOrMissingDatabaseBesideAWALIsRefusedEveryTime() throws {
        let store = try SQLiteStore(path: path)
        let crashed = try crashImage(of: store, adding: 3)
        XCTAssertEqual(truncate(crashed, 0), 0)
        for state in ["empty", "missing"] {
            if state == "missing" { try FileManager.default.removeItem(atPath: crashed) }
            for _ in 0..<2 {
                XCTAssertThrowsError(try SQLiteStore(path: crashed)) { error in
                    XCTAssertTrue("\(error)".contains("relay.db is \(state) but") && "\(error)".contains("was lost"), "\(error)")
                }
            }
            XCTAssertTrue(try SQLiteStore.check(databaseAt: crashed).first?.contains("relay.db is \(state) but") == true)
            XCTAssertThrowsError(try SQLiteStore.backup(databaseAt: crashed, to: dir.appendingPathComponent("\(state).db").path))
            XCTAssertGreaterThan(try FileManager.default.attributesOfItem(atPath: crashed + "-wal")[.size] as? Int ?? 0, 32)
        }
    }

    /// The WAL is copied into the database by a thread of its own: no commit waits for it.
    func testTheWALIsCopiedIntoTheDatabaseBesideTheWriter() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.member(MemberRecord(id: "g", family: "fam", role: .guardian, tokenHash: [0]))])
        func fileSize() throws -> Int { try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? 0 }
        let before = try fileSize()
        let runs = store.checkpointer.runs
        // Over 1,000 pages of events, a commit at a time: a checkpoint copies what the WAL held then.
        for seq in Int64(1)...300 {
            try appendPaddedEvent(seq, to: store)
        }
        XCTAssertTrue(store.checkpointer.awaitRuns(moreThan: runs, seconds: 30), "a checkpoint ran")
        XCTAssertGreaterThan(try fileSize(), before + 500 * 4096, "the events' pages are in relay.db itself, not only in its WAL")
        XCTAssertEqual(try store.events(member: "g", after: 295, limit: 10).map(\.seq), [296, 297, 298, 299, 300])
        // Its thread runs below the writer's priority (here, this thread's): its work can wait.
        let mine = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)
        XCTAssertEqual(Set(try niceValues(ofThreadsNamed: "checkpointer")), [min(19, mine + WALCheckpointer.niceness)])
    }

    /// Under steady writing the WAL is never all copied by the checkpointer alone. Past
    /// `catchUpPages` the thread is asked to copy again whenever more than
    /// `writerTailPages` are left, and the writer copies a shorter rest itself (then its
    /// next commit starts the WAL again), long before the limit past which it copies all
    /// that is left; the thread syncs the database before it leaves the rest to the
    /// writer, so that the writer's sync is of that rest alone, once unless it copied much
    /// more since. The decisions, on a
    /// checkpointer whose thread is not started (its checkpoints played by hand).
    func testPastTheMarkTheThreadCatchesUpAndTheWriterCopiesTheShortRest() throws {
        _ = try SQLiteStore(path: path)  // the database, in WAL mode
        let c = try WALCheckpointer(path: path)
        let (mark, limit) = (WALCheckpointer.catchUpPages, WALCheckpointer.hardLimitPages)
        /// Whether the thread syncs the database after this checkpoint.
        @discardableResult func threadRuns(copying pages: Int32) -> Bool {
            c.condition.lock()
            defer { c.condition.unlock() }
            XCTAssertTrue(c.beginsCheckpoint())
            let syncs = c.syncsBeforeLeavingRest(copied: pages)
            c.endsCheckpoint(copied: pages)
            return syncs
        }
        XCTAssertFalse(c.committed(walPages: mark - 288))
        XCTAssertTrue(c.threadAsked, "1,000 pages more than copied")
        XCTAssertFalse(threadRuns(copying: mark - 288), "below the mark: no sync of its own")
        XCTAssertFalse(c.committed(walPages: mark - 88))
        XCTAssertFalse(c.threadAsked, "below the mark, the thread waits for 1,000 pages more")
        XCTAssertFalse(c.committed(walPages: mark + 312))
        XCTAssertTrue(c.threadAsked, "past the mark, 600 pages left: the thread copies again")
        XCTAssertTrue(threadRuns(copying: mark + 212), "100 pages left for the writer: the thread syncs first")
        XCTAssertTrue(c.committed(walPages: mark + 412), "200 pages left, the thread idle: the writer copies them")
        XCTAssertFalse(c.threadAsked)
        c.writerCheckpointed(through: mark + 412)
        XCTAssertEqual(c.writerCheckpoints, 1)
        // The WAL started again: below the mark, as at first.
        XCTAssertFalse(c.committed(walPages: 900))
        XCTAssertFalse(c.threadAsked)
        // A thread asked with a short rest left leaves it to the writer.
        XCTAssertFalse(c.committed(walPages: mark + 712))
        XCTAssertTrue(c.threadAsked)
        threadRuns(copying: mark + 612)
        XCTAssertFalse(c.committed(walPages: mark + 1312))
        c.condition.lock()
        XCTAssertTrue(c.beginsCheckpoint(), "700 pages left: the thread's")
        XCTAssertFalse(c.leavesRestToWriter(copied: mark + 612), "700 pages left: the thread's")
        c.condition.unlock()
        XCTAssertFalse(c.committed(walPages: mark + 1362), "not the writer's while the thread copies")
        c.condition.lock()
        XCTAssertTrue(c.leavesRestToWriter(copied: mark + 1212), "150 pages left for the writer")
        XCTAssertFalse(c.syncsBeforeLeavingRest(copied: mark + 1212), "600 pages copied since the thread's sync: the writer's to sync")
        c.endsCheckpoint(copied: mark + 1212)
        c.condition.unlock()
        XCTAssertTrue(c.threadAsked, "asked again meanwhile")
        c.condition.lock()
        XCTAssertFalse(c.beginsCheckpoint(), "150 pages left: the writer's to copy")
        c.condition.unlock()
        XCTAssertTrue(c.committed(walPages: mark + 1412))
        c.writerCheckpointed(through: mark + 1412)
        // Past the limit the writer copies whatever is left.
        XCTAssertFalse(c.committed(walPages: 1_000))
        XCTAssertFalse(threadRuns(copying: 1_000), "below the mark")
        XCTAssertTrue(c.committed(walPages: limit))
    }

    /// A checkpoint the WAL hook makes due runs after the commit rather than in it (what
    /// waits for the commit need not wait for its syncs): when the committing thread asks,
    /// or else before the next transaction.
    func testADueCheckpointRunsAfterTheCommitNotInIt() throws {
        let db = try SQLiteDatabase(path: path)
        _ = try db.text("PRAGMA journal_mode = WAL")
        try db.exec("CREATE TABLE t(x)")
        let copied = Mutex<[Int32]>([])
        db.setWALHook({ _ in true }, checkpointed: { pages in copied.withLock { $0.append(pages) } })
        try db.transaction { try db.run("INSERT INTO t VALUES(1)") }
        XCTAssertEqual(copied.withLock { $0 }, [], "not in the commit")
        db.checkpointIfDue()
        XCTAssertEqual(copied.withLock { $0.count }, 1)
        XCTAssertGreaterThan(copied.withLock { $0[0] }, 0, "it copied the commit's pages")
        db.checkpointIfDue()
        XCTAssertEqual(copied.withLock { $0.count }, 1, "once")
        try db.transaction { try db.run("INSERT INTO t VALUES(2)") }
        try db.transaction {
            XCTAssertEqual(copied.withLock { $0.count }, 2, "left undone, it runs before the next transaction")
            try db.run("INSERT INTO t VALUES(3)")
        }
    }

    /// Commits event `seq` of guardian `g`, about four pages long.
    private func appendPaddedEvent(_ seq: Int64, to store: SQLiteStore) throws {
        try store.commit([
            .event(
                EventRecord(
                    member: "g", seq: seq, at: Timestamp(milliseconds: seq), topic: nil,
                    frame: StoreContractTests.frame(seq, padding: 16000)))
        ])
    }

    /// The nice values of this process's threads named `name` (fields 2 and 19 of their `stat`).
    private func niceValues(ofThreadsNamed name: String) throws -> [Int32] {
        try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap { tid in
            guard let stat = try? String(contentsOfFile: "/proc/self/task/\(tid)/stat", encoding: .utf8),
                let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")"),
                stat[stat.index(after: open)..<close] == name
            else { return nil }
            let fields = stat[stat.index(after: close)...].split(separator: " ")  // from field 3
            return fields.count > 16 ? Int32(fields[16]) : nil
        }
    }

    /// The checkpoint of a clean stop (`checkpoint()`) holds the checkpointer back, and
    /// waits for one it has under way: SQLite refuses a second checkpoint at once (no busy
    /// timeout), which would leave the WAL where a clean stop promises none.
    func testNoCheckpointRunsBesideTheStopsOwn() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.member(MemberRecord(id: "g", family: "fam", role: .guardian, tokenHash: [0]))])
        func write(_ seqs: ClosedRange<Int64>) throws {
            for seq in seqs {
                try appendPaddedEvent(seq, to: store)
            }
        }
        let runs = store.checkpointer.runs
        try store.checkpointer.whileIdle {
            try write(1...300)  // over 1,000 pages: the checkpointer is asked
            XCTAssertFalse(store.checkpointer.awaitRuns(moreThan: runs, seconds: 0.5), "held back")
        }
        XCTAssertTrue(store.checkpointer.awaitRuns(moreThan: runs, seconds: 30), "and run once let go")
        try write(301...600)
        XCTAssertNoThrow(try store.checkpoint())
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int, 0, "the WAL emptied")
    }

    func testCheckFindsAKnownHandleStoredTwice() throws {
        let h = NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555 1")!
        try SQLiteStore(path: path).commit([
            .family("f"), .member(MemberRecord(id: "c1", family: "f", role: .child, tokenHash: [0])),
            .knownHandle(KnownHandleRecord(row: 1, child: "c1", handle: h, permanent: true, until: nil, actions: [])),
        ])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        exec(
            "INSERT INTO knownHandles(row, child, kind, value, permanent, until, actions) SELECT 2, child, kind, value, 0, 5, '[]' FROM knownHandles"
        )
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["the known handle phoneNumber:+15551 of c1 is stored 2 times"])
    }

    func testAFullDiskFailsTheCommitWholeAndIsSurvivedOnceThereIsRoom() throws {
        try SQLiteStore(path: path).commit([
            .family("kept"), .member(MemberRecord(id: "g", family: "kept", role: .guardian, tokenHash: [0])),
        ])
        let pages = pageCount(ofDatabaseAt: path)
        let capped = try SQLiteStore(path: path, maxPageCount: pages + 2)
        let big = (1...100).map {
            Change.event(
                EventRecord(
                    member: "g", seq: $0, at: Timestamp(milliseconds: 0), topic: nil, frame: StoreContractTests.frame($0, padding: 4000)))
        }
        XCTAssertThrowsError(try capped.commit([.family("lost")] + big)) { error in
            XCTAssertTrue((error as? SQLiteError)?.isFull == true, "\(error)")
        }
        XCTAssertEqual(try capped.load().families, ["kept"], "nothing of the failed commit")
        try capped.commit([.family("small")])  // what fits still goes in
        XCTAssertEqual(try capped.load().families, ["kept", "small"])
        _ = try capped.db.text("PRAGMA max_page_count = 100000")  // room again
        try capped.commit(big)
        XCTAssertEqual(try capped.load().heads["g"], 100)
    }

    /// Before its first checkpoint a store is all in its WAL: the database file holds only
    /// an empty first page. Without the WAL (and its index), starting, checking or backing
    /// it up is refused, rather than taken for a new store.
    func testAStoreWhoseWALWasLostBeforeAnyCheckpointIsRefused() throws {
        let store = try SQLiteStore(path: path)
        try store.commit(try StoreContractTests.turns()[0])
        let lost = dir.appendingPathComponent("lost").path
        try FileManager.default.createDirectory(atPath: lost, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: path, toPath: lost + "/relay.db")  // its WAL and index left behind
        let said = "holds no tables and no WAL is beside it: the WAL (\(lost)/relay.db-wal), which held the whole store, was lost"
        XCTAssertThrowsError(try SQLiteStore(path: lost + "/relay.db")) { XCTAssertTrue("\($0)".contains(said), "\($0)") }
        let findings = try SQLiteStore.check(databaseAt: lost + "/relay.db")
        XCTAssertEqual(findings.count, 1)
        XCTAssertTrue(findings.first?.contains(said) == true, "\(findings)")
        XCTAssertThrowsError(try SQLiteStore.backup(databaseAt: lost + "/relay.db", to: lost + "/backup.db")) {
            XCTAssertTrue("\($0)".contains(said), "\($0)")
        }
        withExtendedLifetime(store) {}
    }

    /// A new store that could not be set up (its disk full) is not left behind, to be
    /// taken at the next start for one that lost its WAL.
    func testANewStoreThatCouldNotBeSetUpIsMadeAgainAtTheNextStart() throws {
        XCTAssertThrowsError(try SQLiteStore(path: path, maxPageCount: 1))
        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.load().families, [])
    }

    func testABackupIsAWholeStoreAndRestoresWhatItHeld() throws {
        let store = try SQLiteStore(path: path)
        let turns = try StoreContractTests.turns()
        try store.commit(turns[0])
        let backup = dir.appendingPathComponent("backup.db").path
        try SQLiteStore.backup(databaseAt: path, to: backup)  // the WAL is not checkpointed: the backup reads it
        XCTAssertThrowsError(try SQLiteStore.backup(databaseAt: path, to: backup), "never over an existing file")
        XCTAssertThrowsError(try SQLiteStore.backup(databaseAt: path, to: dir.path + "/missing/backup.db")) { error in
            XCTAssertTrue("\(error)".contains("there is no directory \(dir.path)/missing to write"), "\(error)")
        }
        XCTAssertThrowsError(try SQLiteStore.restore(backup: dir.path + "/missing.db", to: path)) { error in
            XCTAssertTrue("\(error)".contains("cannot read \(dir.path)/missing.db: No such file or directory"), "\(error)")
        }
        let other = dir.appendingPathComponent("other.db").path
        XCTAssertTrue(FileManager.default.createFile(atPath: other + ".partial", contents: Data("mine".utf8)))
        XCTAssertThrowsError(try SQLiteStore.backup(databaseAt: path, to: other)) { error in
            XCTAssertTrue("\(error)".contains("other.db.partial already exists"), "\(error)")
        }
        XCTAssertEqual(try String(contentsOfFile: other + ".partial", encoding: .utf8), "mine", "nor over one by that name")
        try store.commit(turns[1])
        let backedUp = try SQLiteStore(path: backup).load()
        var expected = StoreSnapshot()
        turns[0].forEach { expected.apply($0) }
        XCTAssertEqual(backedUp.normalized.questions, expected.normalized.questions)
        XCTAssertEqual(backedUp.normalized.sessions, expected.normalized.sessions)

        let replacedHeld = try store.load().normalized.questions
        let restoredAt = Int64(Date().timeIntervalSince1970 * 1_000_000)
        XCTAssertEqual(try SQLiteStore.restore(backup: backup, to: path).first, path + ".replaced")
        let restored = try SQLiteStore(path: path).load()
        XCTAssertEqual(restored.normalized.sessions, expected.normalized.sessions)
        // Every stream goes on above any seq given after the backup (above its head by
        // 2^32, and above the restore's time in microseconds); the backup's events stay,
        // and the jump is a restore point.
        XCTAssertFalse(expected.heads.isEmpty)
        for member in expected.members.map(\.id) {
            let head = try XCTUnwrap(restored.heads[member], member)
            XCTAssertGreaterThanOrEqual(head, (expected.heads[member] ?? 0) + SQLiteStore.seqsSkippedAtRestore, member)
            XCTAssertGreaterThanOrEqual(head, restoredAt, member)
            XCTAssertEqual(restored.restorePoints[member], [RestorePoint(through: expected.heads[member] ?? 0, head: head)], member)
        }
        XCTAssertEqual(restored.firstRetained, expected.firstRetained)
        let (member, first) = try XCTUnwrap(expected.firstRetained.first)
        let next = try XCTUnwrap(restored.heads[member]) + 1
        try SQLiteStore(path: path).commit([
            .event(
                EventRecord(member: member, seq: next, at: Timestamp(milliseconds: 0), topic: nil, frame: StoreContractTests.frame(next)))
        ])
        XCTAssertLessThan(first, next)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [], "the jump between the backup's events and the next is no hole")
        XCTAssertThrowsError(try SQLiteStore.restore(backup: path + ".replaced-wal", to: path), "not a backup")
        // Restored again (the wrong backup, say): the first store replaced is still there,
        // and the streams go on above where the first restore put them.
        XCTAssertEqual(try SQLiteStore.restore(backup: backup, to: path).first, path + ".replaced.2")
        let again = try SQLiteStore(path: path).load()
        for (member, head) in restored.heads { XCTAssertGreaterThan(again.heads[member] ?? 0, head, member) }
        XCTAssertEqual(try SQLiteStore(path: path + ".replaced").load().normalized.questions, replacedHeld)
        XCTAssertNotEqual(replacedHeld, expected.normalized.questions, "the store replaced first held more than the backup")
    }

    /// A WAL left without its database (relay.db deleted after a crash, as a damaged
    /// store's advice leads to) is put aside by a restore, never replayed onto the backup.
    func testARestoreOverALoneWALHoldsTheBackupAlone() throws {
        let store = try SQLiteStore(path: path)
        let turns = try StoreContractTests.turns()
        try store.commit(turns[0])
        let backup = dir.appendingPathComponent("backup.db").path
        try SQLiteStore.backup(databaseAt: path, to: backup)
        try store.commit(turns[1] + [.family("after-the-backup")])  // in the WAL
        let lone = dir.appendingPathComponent("lone")
        try FileManager.default.createDirectory(at: lone, withIntermediateDirectories: true)
        let target = lone.appendingPathComponent("relay.db").path
        try FileManager.default.copyItem(atPath: path + "-wal", toPath: target + "-wal")
        XCTAssertEqual(try SQLiteStore.restore(backup: backup, to: target), [target + ".replaced-wal"], "the WAL alone kept, aside")
        XCTAssertTrue(FileManager.default.fileExists(atPath: target + ".replaced-wal"))
        XCTAssertEqual(try SQLiteStore(path: target).load().families, try SQLiteStore(path: backup).load().families)
    }

    /// An older relay's journals left beside a lost database go aside too: a start would
    /// fold them into the backup.
    func testARestoreOverAnOlderRelaysJournalsHoldsTheBackupAlone() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.family("backed-up")])
        let backup = dir.appendingPathComponent("backup.db").path
        try SQLiteStore.backup(databaseAt: path, to: backup)
        let fixture = try XCTUnwrap(Bundle.module.url(forResource: "Fixtures/journaled-store", withExtension: nil))
        let lost = dir.appendingPathComponent("lost")
        try FileManager.default.createDirectory(at: lost, withIntermediateDirectories: true)
        let target = lost.appendingPathComponent("relay.db").path
        for n in 0..<2 {
            try FileManager.default.copyItem(atPath: fixture.path + "/relay.db-changes.\(n)", toPath: target + "-changes.\(n)")
        }
        XCTAssertEqual(
            try SQLiteStore.restore(backup: backup, to: target), [target + ".replaced-changes.0", target + ".replaced-changes.1"])
        XCTAssertEqual(try SQLiteStore(path: target).load().families, ["backed-up"])
        XCTAssertThrowsError(try SQLiteStore.restore(backup: dir.path, to: target)) { error in
            XCTAssertTrue("\(error)".contains("is not a file"), "\(error)")
        }
    }

    /// Questions stored since the last indexing pass are listed in memory: found by id and
    /// by child before the pass, after it, and after a restart in between.
    func testQuestionsAreFoundBeforeAndAfterTheyAreIndexedAndAcrossARestart() throws {
        var store = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        var asked = try (1...5).map { try StoreContractTests.question(row: $0) }
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        try store.commit(asked.map { .question($0) })
        func assertFound(_ when: String) throws {
            for q in asked { XCTAssertEqual(try store.question(q.key), q, when) }
            let listed = try store.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 9)
            XCTAssertEqual(listed.map(\.row), asked.sorted { QuestionPlace($0) > QuestionPlace($1) }.map(\.row), when)
            XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [], when)
        }
        try assertFound("listed")
        store = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        XCTAssertEqual(store.questionTail.withLock { $0.entries.count }, 5, "listed again at start")
        try assertFound("listed after a restart")
        try store.indexQuestions()
        XCTAssertEqual(store.questionTail.withLock { $0.entries.count }, 0)
        try assertFound("indexed")
        // Asked anew under a later time (as a newer asking from another device is): its place moves.
        asked[1].createdAt = Timestamp(milliseconds: 100)
        asked[1].attempt = 2
        try store.commit([.question(asked[1])])
        try assertFound("asked anew")
        exec("DELETE FROM questionIDs WHERE key = 3")
        XCTAssertEqual(
            try SQLiteStore.check(databaseAt: path),
            ["1 stored questions are missing from the lookup by id (questions up to row 5 must be in it)"])
    }

    /// A pass lists the pending questions it goes by, rather than an index written at each
    /// ask and answer: a start finds every pending question on either side of the mark, one
    /// asked again since the pass too; one answered since stays listed until a pass sweeps it.
    func testAStartFindsEveryPendingQuestionOnEitherSideOfTheIndexMark() throws {
        let store = try storeWithChild()
        var asked = try (1...4).map { try StoreContractTests.question(row: $0) }
        asked[3].status = .cancelled
        try store.commit(asked.map { .question($0) })
        try store.indexQuestions()
        asked[1].status = .expired
        asked[3].status = .pending
        asked[3].attempt = 2
        try store.commit([.questionState(asked[1]), .question(asked[3]), .question(try StoreContractTests.question(row: 5))])
        XCTAssertEqual(try listedPending(in: store), [1, 2, 3, 4])
        XCTAssertEqual(try SQLiteStore(path: path).load().questions.map(\.row), [1, 3, 4, 5])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        try store.indexQuestions()
        XCTAssertEqual(try listedPending(in: store), [1, 3, 4, 5], "swept and listed by the next pass")
        asked[1].status = .pending  // (not a change the core makes, but one the store keeps right)
        try store.commit([.questionState(asked[1])])
        XCTAssertEqual(try listedPending(in: store), [1, 2, 3, 4, 5])
        asked[1].status = .expired
        try store.commit([.questionState(asked[1])])
        exec("DELETE FROM pendingQuestions WHERE key = 4")
        XCTAssertEqual(
            try SQLiteStore.check(databaseAt: path),
            ["1 pending questions are missing from the list of pending questions (questions up to row 5 must be in it)"])
        XCTAssertEqual(try SQLiteStore(path: path).load().questions.map(\.row), [1, 3, 5], "what a start would have missed")
    }

    /// A question pending again between the steps of a pass (here a newer asking from the
    /// hub, still attempt 1) in a row the pass found finished is listed all the same; and
    /// the sweeps, around the list and again, drop every entry answered since.
    func testAQuestionPendingAgainDuringAPassIsListedAndTheAnsweredAreSwept() throws {
        let store = try storeWithChild()
        var asked = try (1...3000).map { try StoreContractTests.question(row: $0) }
        asked[9].status = .answered
        try store.commit(asked.map { .question($0) })
        XCTAssertTrue(try store.indexQuestionsStep(force: true), "a pass of three steps under way, its first 1,024 rows gone by")
        asked[9].status = .pending
        asked[9].createdAt = Timestamp(milliseconds: asked[9].createdAt.milliseconds + 1)
        try store.commit([.question(asked[9])])
        while try store.indexQuestionsStep(force: true) {}
        XCTAssertEqual(try SQLiteStore(path: path).load().questions.count, 3000)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        // All but three answered: the next passes' sweeps leave those three (and the new ones).
        for i in asked.indices where ![0, 9, 2999].contains(i) { asked[i].status = .answered }
        try store.commit(asked.filter { $0.status == .answered }.map { .questionState($0) })
        for row in Int64(3001)...3003 {
            try store.commit([.question(try StoreContractTests.question(row: row))])
            try store.indexQuestions()
        }
        XCTAssertEqual(try listedPending(in: store), [1, 10, 3000, 3001, 3002, 3003])
    }

    /// A child's list pages through its questions in the lookup tables and those still
    /// listed in memory alike, in either order, with or without a status, each once.
    func testPagesMergeTheListedQuestionsWithThoseInTheTables() throws {
        let store = try storeWithChild()
        let asked = try (Int64(1)...60).map { row in
            var q = try StoreContractTests.question(row: row)
            if row % 3 == 0 { q.status = .cancelled }
            return q
        }
        try store.commit(asked[..<20].map { .question($0) })
        try store.indexQuestions()
        try store.commit(asked[20...].map { .question($0) })
        XCTAssertEqual(store.questionTail.withLock { $0.entries.count }, 40, "40 still listed")
        for newestFirst in [false, true] {
            for status in [nil, QuestionStatus.cancelled] {
                var rows: [Int64] = []
                var after: QuestionPlace?
                while true {
                    let page = try store.questions(of: "c1", status: status, newestFirst: newestFirst, after: after, limit: 7)
                    rows += page.map(\.row)
                    guard let last = page.last else { break }
                    after = QuestionPlace(last)
                }
                let expected = asked.filter { status == nil || $0.status == status }.map(\.row)
                XCTAssertEqual(rows, newestFirst ? expected.reversed() : expected, "\(newestFirst) \(String(describing: status))")
            }
        }
    }

    /// A store with child c1, whose questions stay listed in memory until a pass is forced.
    private func storeWithChild() throws -> SQLiteStore {
        let store = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        return store
    }

    /// The rows the list of pending questions holds.
    private func listedPending(in store: SQLiteStore) throws -> [Int64] {
        var rows: [Int64] = []
        try store.db.run("SELECT key FROM pendingQuestions ORDER BY key") { rows.append($0.int(0)) }
        return rows
    }

    /// A store (its questions added to the lookup tables at the first chance) with child c1
    /// and, from row 1, `count` cancelled questions of it, in the lookup tables.
    private func storeWithCancelledQuestions(_ count: Int64) throws -> (SQLiteStore, [QuestionRecord]) {
        try storeWithQuestions(count, status: .cancelled)
    }

    /// A store where child c1 asked questions at rows 1 to `count`, stored with `status`,
    /// all in the lookup tables.
    private func storeWithQuestions(_ count: Int64, status: QuestionStatus = .pending) throws -> (SQLiteStore, [QuestionRecord]) {
        let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        let asked = try (Int64(1)...count).map { row in
            var q = try StoreContractTests.question(row: row)
            q.status = status
            return q
        }
        try store.commit(asked.map { .question($0) })
        try store.indexQuestions()
        return (store, asked)
    }

    /// A forgetting pass chooses its questions first and deletes them in steps: one asked
    /// again in between is pending again, and stays.
    func testAQuestionAskedAgainWhileAForgettingPassRunsIsNotForgotten() throws {
        var (store, asked) = try storeWithCancelledQuestions(300)
        XCTAssertTrue(try store.maintainQuestions(keeping: QuestionsKept(count: 10), limit: 1000), "more than one step")
        asked[279].status = .pending
        asked[279].attempt = 2
        try store.commit([.question(asked[279])])
        while try store.maintainQuestions(keeping: QuestionsKept(count: 10), limit: 1000) {}
        XCTAssertEqual(try store.question(asked[279].key)?.status, .pending)
        XCTAssertEqual(try store.load().questions.map(\.row), [280])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    /// Questions finished as they are in use, by a state of their own (answered, or cancelled
    /// and then pending again from the hub), are forgotten by that state: the answered go,
    /// with their states, and the one pending again stays.
    func testForgettingGoesByAQuestionsStateRow() throws {
        var (store, asked) = try storeWithQuestions(6)
        for i in 0..<5 {
            asked[i].status = .answered
            asked[i].outcome = Outcome(choice: asked[i].content.choices[0], guardian: "g1", answeredAt: Timestamp(milliseconds: 9))
        }
        asked[2].status = .cancelled
        asked[2].outcome = nil
        try store.commit(asked[0..<5].map { .questionState($0) })
        asked[2].status = .pending
        try store.commit([.questionState(asked[2])])
        while try store.maintainQuestions(keeping: QuestionsKept(count: 1), limit: 1000) {}
        XCTAssertEqual(try store.load().questions.map(\.row), [3, 6], "the pending ones stay")
        XCTAssertNil(try store.question(asked[0].key), "answered, forgotten")
        XCTAssertEqual(try store.question(asked[2].key)?.status, .pending)
        XCTAssertEqual(try store.db.scalar("SELECT key FROM questionStates"), 3, "the states of the forgotten went with them")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    /// A question whose status is damaged on disk (in its row or its state's) is neither
    /// left out of what a start reads, as if finished, nor forgotten: the start is refused
    /// as damaged, naming it. Listed by an indexing pass (rows 1–3) or above its mark (4).
    func testAQuestionWhoseStatusIsDamagedStopsTheStartAndIsNeverForgotten() throws {
        var (store, asked) = try storeWithQuestions(3)
        asked[2].status = .cancelled
        try store.commit([.questionState(asked[2]), .question(try StoreContractTests.question(row: 4))])
        XCTAssertEqual(try store.load().questions.map(\.row), [1, 2, 4])
        for (row, damage) in [
            (1, "UPDATE questions SET status = 'pen\u{1}ding' WHERE key = 1"),
            (3, "UPDATE questionStates SET status = 'cancel' WHERE key = 3"),
            (4, "UPDATE questions SET status = 'pendinh' WHERE key = 4"),
        ] {
            let copy = dir.appendingPathComponent("damaged\(row).db").path
            try SQLiteStore.backup(databaseAt: path, to: copy)
            exec(damage, at: copy)
            XCTAssertThrowsError(try SQLiteStore(path: copy).load(), damage) { error in
                XCTAssertTrue((error as? SQLiteError)?.isDamaged == true, "\(error)")
                XCTAssertTrue("\(error)".contains(asked.first { $0.row == row }.map(\.id) ?? "question"), "\(error)")
            }
            // Upkeep goes on (a question more, a pass of the lookup tables and its sweep of
            // the pending list, forgetting): the damaged one stays, and is still found.
            let reopened = try SQLiteStore(path: copy, questionIndexSeconds: 0)
            try reopened.commit([.question(try StoreContractTests.question(row: 5))])
            try reopened.indexQuestions()
            while try reopened.maintainQuestions(keeping: QuestionsKept(count: 1), limit: 1000) {}
            XCTAssertEqual(try reopened.db.scalar("SELECT count(*) FROM questions WHERE key = ?", [.int(Int64(row))]), 1, damage)
            XCTAssertThrowsError(try reopened.load(), "still refused after upkeep: \(damage)")
        }
    }

    /// A NULL where the schema has none (a damaged cell) is refused as damage, never read
    /// as an empty member id, family or session. (The schema is loosened to write one.)
    func testANullInAColumnThatHasNoneStopsTheStart() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([
            .family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1])),
            .session(SessionRecord(member: "c1", name: "app", cursor: 0, topics: [])),
        ])
        for (table, column) in [("members", "family"), ("sessions", "topics")] {
            let copy = dir.appendingPathComponent("null-\(table).db").path
            try SQLiteStore.backup(databaseAt: path, to: copy)
            exec(
                "PRAGMA writable_schema = ON; UPDATE sqlite_schema SET sql = replace(sql, '\(column) TEXT NOT NULL', '\(column) TEXT') WHERE name = '\(table)'",
                at: copy)
            exec("UPDATE \(table) SET \(column) = NULL", at: copy)
            XCTAssertThrowsError(try SQLiteStore(path: copy).load(), table) { error in
                XCTAssertTrue((error as? SQLiteError)?.isDamaged == true, "\(error)")
            }
        }
    }

    /// The other order: a forgetting step deletes a finished row, then a commit stores it
    /// again (the core had read it and asked it anew): it is found again, and listed.
    func testARowStoredAgainAfterAForgettingStepDeletedItIsInTheLookupTables() throws {
        var (store, asked) = try storeWithCancelledQuestions(6)
        let kept = QuestionsKept(count: 2)
        XCTAssertTrue(try store.maintainQuestions(keeping: kept, limit: 1))  // chooses rows 1–4, deletes 1
        XCTAssertEqual(try store.question(asked[1].key)?.row, 2, "what the loop read")
        XCTAssertTrue(try store.maintainQuestions(keeping: kept, limit: 1))  // deletes 2
        asked[1].status = .pending
        asked[1].attempt = 2
        try store.commit([.question(asked[1])])
        XCTAssertEqual(try store.load().questions.map(\.row), [2])
        XCTAssertEqual(try store.question(asked[1].key)?.status, .pending)
        XCTAssertEqual(try store.questions(of: "c1", status: .pending, newestFirst: true, after: nil, limit: 99).map(\.row), [2])
        while try store.maintainQuestions(keeping: kept, limit: 1) {}
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    /// A list read while indexing passes end: the last step commits the tables, then the
    /// list in memory is trimmed; a read between must still find every question. A race,
    /// so run many times over (the writer pauses between its steps, as pruning steps do).
    func testAListReadWhileIndexingPassesEndMissesNoQuestion() throws {
        let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        try store.commit(try (Int64(1)...300).map { .question(try StoreContractTests.question(row: $0)) })
        try store.indexQuestions()
        final class Progress: Sendable {
            let stored = Mutex<Int64>(300)
            let done = Mutex(false)
        }
        let progress = Progress()
        let writer = Thread {
            for row in Int64(301)...450 {
                try! store.commit([.question(try! StoreContractTests.question(row: row))])
                progress.stored.withLock { $0 = row }
                usleep(2000)
                try! store.indexQuestions()
                usleep(2000)
            }
            progress.done.withLock { $0 = true }
        }
        writer.start()
        var (reads, misses) = (0, 0)
        while !progress.done.withLock({ $0 }) {
            let before = progress.stored.withLock { $0 }
            let n = try store.questions(of: "c1", status: nil, newestFirst: true, after: nil, limit: 100_000).count
            reads += 1
            if n < before { misses += 1 }
        }
        XCTAssertEqual(misses, 0, "\(misses) of \(reads) reads missed questions stored before they began")
    }

    /// A question's answer is a row of its own: the question's row (and its page) is left as
    /// it was, the question is read back answered, and asking it again or forgetting it drops
    /// the answer's row.
    func testAnAnswerLeavesTheQuestionsRowAsItWas() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        var q = try StoreContractTests.question(row: 1)
        try store.commit([.question(q)])
        func row() throws -> [String] {
            var cells: [String] = []
            try store.db.run("SELECT status, attempt, quote(outcome), hex(content) FROM questions WHERE key = 1") { r in
                cells = (0..<4).map { r.text($0) }
            }
            return cells
        }
        let asked = try row()
        q.status = .answered
        q.outcome = Outcome(choice: q.content.choices[0], guardian: "g1", answeredAt: Timestamp(milliseconds: 5_000))
        try store.commit([.questionState(q)])
        XCTAssertEqual(try row(), asked)
        XCTAssertEqual(try store.question(q.key)?.status, .answered)
        XCTAssertEqual(try store.question(q.key)?.outcome, q.outcome)
        XCTAssertEqual(try store.load().questions.map(\.row), [], "no longer pending")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])

        q.status = .pending
        q.attempt = 2
        q.outcome = nil
        try store.commit([.question(q)])
        XCTAssertEqual(try store.question(q.key)?.status, .pending, "asked again")
        XCTAssertEqual(try store.question(q.key)?.attempt, 2)
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM questionStates"), 0)
        XCTAssertEqual(try store.load().questions.map(\.row), [1])

        q.status = .cancelled
        try store.commit([.questionState(q)])
        XCTAssertEqual(try store.question(q.key)?.status, .cancelled)
        XCTAssertNil(try store.question(q.key)?.outcome)
        try store.db.run("DELETE FROM questions WHERE key = 1")
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM questionStates"), 0, "forgotten with its question")
        // The state of a question no longer stored makes no row.
        try store.commit([.questionState(q)])
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM questionStates"), 0)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        try store.db.run("INSERT INTO questionStates(key, status, attempt) VALUES(7, 'cancelled', 1)")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["1 states of questions belong to no stored question"])
    }

    /// `check` reads each question as a request would, its state's outcome included.
    func testCheckFindsAnOutcomeThatCannotBeRead() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        var q = try StoreContractTests.question(row: 1)
        try store.commit([.question(q)])
        q.status = .answered
        q.outcome = Outcome(choice: q.content.choices[0], guardian: "g1", answeredAt: Timestamp(milliseconds: 5_000))
        try store.commit([.questionState(q)])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        try store.db.run("UPDATE questionStates SET outcome = '{\"choice\":' WHERE key = 1")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["question \(q.id) (row 1) cannot be read"])
    }

    /// A damaged row is quoted with its control characters escaped: a terminal shows them.
    func testDamagedContentIsQuotedEscaped() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        let q = try StoreContractTests.question(row: 1)
        try store.commit([.question(q)])
        try store.db.run("UPDATE questions SET content = ? WHERE key = 1", [.blob(Array("{\u{1B}[2J\u{7}é\n".utf8))])
        XCTAssertThrowsError(try store.question(q.key)) { error in
            let message = (error as? SQLiteError)?.message ?? ""
            XCTAssertEqual(message, #"a stored question {\u{1B}[2J\u{07}é\n cannot be read"#)
        }
    }

    /// An indexing pass takes the ids listed when it begins and adds them to the lookup by id
    /// a stretch at a time: each is found by id before, during and after the pass, as is one
    /// stored (or asked again) while it runs.
    func testEveryQuestionIsFoundByIDWhileAnIndexingPassRuns() throws {
        let store = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        var asked = try (Int64(1)...3000).map { try StoreContractTests.question(row: $0) }
        try store.commit(asked.map { .question($0) })
        func unfound() throws -> [Int64] {  // the first few rows not found by id
            Array(try asked.filter { try store.question($0.key)?.row != $0.row }.map(\.row).prefix(5))
        }
        XCTAssertEqual(try unfound(), [])
        XCTAssertTrue(try store.indexQuestionsStep(force: true), "a pass of several steps")
        asked.append(try StoreContractTests.question(row: 3001))
        asked[9].status = .pending
        asked[9].attempt = 2
        try store.commit([.question(asked[3000]), .question(asked[9])])
        XCTAssertEqual(try unfound(), [], "during the pass")
        while try store.indexQuestionsStep(force: false) {}
        XCTAssertEqual(try unfound(), [], "after it")
        XCTAssertEqual(try store.question(asked[9].key)?.attempt, 2)
        try store.indexQuestions()
        XCTAssertEqual(try unfound(), [], "after the next")
        XCTAssertEqual(store.questionTail.withLock { $0.idsHeld }, 0, "every id let go once in the tables")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    func testCheckFindsHolesCursorsPastTheHeadAndStrayQuestions() throws {
        let store = try SQLiteStore(path: path)
        try store.commit(StoreContractTests.turns()[0])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        for seq in Int64(3)...6 { try store.commit([.event(StoreContractTests.event("g1", seq))]) }
        try store.commit([
            .session(SessionRecord(member: "g1", name: "far", cursor: 40, topics: [])),
            .session(SessionRecord(member: "g1", name: "new", cursor: 5, acknowledged: 2, topics: [])),
            .question(try StoreContractTests.question(child: "nobody", row: 10)),
        ])
        let whole = try SQLiteStore.check(databaseAt: path)
        XCTAssertEqual(whole.count, 2, "\(whole)")
        XCTAssertFalse(whole.contains { $0.contains("session new") }, "a session acknowledged below its cursor is whole: \(whole)")
        exec("DELETE FROM events WHERE member = 'g1' AND firstSeq = 4")
        exec("UPDATE questionTally SET count = count + 2 WHERE child = 'c1'")
        exec("UPDATE sessions SET acknowledged = 6 WHERE name = 'new'")
        let findings = try SQLiteStore.check(databaseAt: path)
        XCTAssertEqual(findings.count, 5, "\(findings)")
        XCTAssertTrue(findings.contains { $0.contains("session new of g1 has acknowledged 6, beyond its cursor 5") }, "\(findings)")
        XCTAssertTrue(findings.contains { $0.contains("the question tally of c1 says 5 questions") }, "\(findings)")
        XCTAssertTrue(findings.contains { $0.contains("g1's events 1…6 have 1 missing") }, "\(findings)")
        XCTAssertTrue(findings.contains { $0.contains("cursor 40") }, "\(findings)")
        XCTAssertTrue(findings.contains { $0.contains("asked by nobody") }, "\(findings)")
    }

    /// A commit's events of one member past `rowBytes` go in more rows, each read on its own
    /// by a replay step; the stream reads back whole and in order, also once indexed.
    func testAMembersLargeEventsOfOneCommitAreSplitIntoRowsOfAboutAReplayStep() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([.member(MemberRecord(id: "g1", family: "fam", role: .guardian, tokenHash: [0]))])
        let big = SQLiteStore.rowBytes / 3 + 1
        var events = (Int64(1)...7).map { seq in
            EventRecord(
                member: "g1", seq: seq, at: Timestamp(milliseconds: seq), topic: nil,
                frame: StoreContractTests.frame(seq, padding: seq == 7 ? 0 : big))
        }
        events.insert(StoreContractTests.event("c1", 1), at: 2)
        try store.commit(events.map { .event($0) })
        // Three frames pass `rowBytes`: the fourth starts a row, and the seventh (small) a third.
        let rows = try (1...3).map { n in
            try store.db.scalar(
                "SELECT firstSeq * 100 + lastSeq FROM events WHERE member = 'g1' ORDER BY id LIMIT 1 OFFSET ?", [.int(n - 1)])
        }
        XCTAssertEqual(rows, [103, 406, 707])
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM events WHERE member = 'c1'"), 1)
        func seqs(after seq: Int64, in store: SQLiteStore) throws -> [Int64] {
            try store.events(member: "g1", after: seq, limit: 100, maxBytes: .max).map(\.seq)
        }
        for after in Int64(0)...7 { XCTAssertEqual(try seqs(after: after, in: store), Array((after + 1)..<8)) }
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 100, maxBytes: 1).map(\.seq), [1], "a step's budget")
        // Indexed in a round, as rows that stay are, and reopened: the same.
        store.eventIndexRoundRows = 1
        while try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0], settledThrough: StoreContractTests.later, limit: 10
        ).more {}
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM eventIndex WHERE member = 'g1'"), 3)
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(try seqs(after: 0, in: reopened), Array(1...7))
        XCTAssertEqual(try seqs(after: 5, in: reopened), [6, 7])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    /// New rows stay out of the events index until pruning decides; `check` finds a row
    /// the mark has passed that is not in the index (a replay would miss it).
    func testCheckFindsARowPassedByTheIndexMarkButNotInTheIndex() throws {
        let store = try SQLiteStore(path: path)
        try store.commit([
            .member(MemberRecord(id: "g1", family: "fam", role: .guardian, tokenHash: [0])),
            .session(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: [])),
        ])
        for seq in Int64(1)...3 { try store.commit([.event(StoreContractTests.event("g1", seq, at: seq))]) }
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [], "unindexed rows above the mark are as they should be")
        // Nothing acknowledged: pruning keeps the rows, and a round adds them to the index.
        store.eventIndexRoundRows = 3
        XCTAssertTrue(
            try store.prune(
                olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0], settledThrough: StoreContractTests.later, limit: 10
            )
            .more)
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM eventIndex"), 0, "the rows wait for a round")
        _ = try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0], settledThrough: StoreContractTests.later, limit: 10)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        exec("DELETE FROM eventIndex WHERE lastSeq = 2")
        XCTAssertEqual(
            try SQLiteStore.check(databaseAt: path), ["1 stored event rows are missing from the events index (rows up to 3 must be in it)"])
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 3], "what the replay would have missed")
        // A row stored twice, once in the index and once not (the index's uniqueness does
        // not cover both), is found too.
        exec("INSERT INTO eventIndex(member, lastSeq, id) SELECT member, lastSeq, id FROM events WHERE firstSeq = 2")
        exec("INSERT INTO eventIndex(member, lastSeq, id) VALUES('g1', 9, 99)")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["1 entries of the events index lead to no stored event row"])
        exec("DELETE FROM eventIndex WHERE lastSeq = 9")
        exec(
            "INSERT INTO events(member, firstSeq, lastSeq, at, topics, frames) SELECT member, firstSeq, lastSeq, at, topics, frames FROM events WHERE firstSeq = 3"
        )
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), ["g1's events 1…3 are stored more than once (1 too many)"])
    }

    private func event(_ member: String, _ seq: Int64, at: Int64) -> Change { .event(StoreContractTests.event(member, seq, at: at)) }

    private func guardians(_ ids: [String], cursors: [String: Int64] = [:]) -> [Change] {
        ids.map { .member(MemberRecord(id: $0, family: "fam", role: .guardian, tokenHash: [0])) }
            + ids.map { .session(SessionRecord(member: $0, name: "tab", cursor: cursors[$0] ?? 0, topics: [])) }
    }

    /// Rows that stay wait, listed, for a round, which adds them to the index member by
    /// member; the mark stops at the first row waiting, and a waiting row that may go
    /// later goes without being indexed.
    func testRowsThatStayWaitForARoundThatIndexesThemMemberByMember() throws {
        let store = try SQLiteStore(path: path)
        store.eventIndexRoundRows = 4
        try store.commit(guardians(["g1", "g2", "g3"]))
        for seq in Int64(1)...3 {
            try store.commit([event("g1", seq, at: seq), event("g2", seq, at: seq), event("g3", seq, at: seq)])
        }
        func prune(_ acknowledged: [String: Int64], limit: Int = 100) throws -> PruneStep {
            try store.prune(
                olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: StoreContractTests.later, limit: limit)
        }
        func indexed() throws -> [String] {
            var out: [String] = []
            try store.db.run("SELECT member, lastSeq FROM eventIndex ORDER BY member, lastSeq") { r in
                out.append("\(r.text(0)) \(r.int(1))")
            }
            return out
        }
        func mark() throws -> Int64? { try store.db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'") }
        // g1 acknowledged its first event, in the store too; g1's later rows, and g2's and g3's, wait.
        try store.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 1, topics: []))])
        var step = try prune(["g1": 1])
        XCTAssertEqual(step.through, ["g1": 1])
        XCTAssertTrue(step.more, "8 rows wait: a round is due")
        XCTAssertEqual(try indexed(), [])
        XCTAssertEqual(try mark(), 1, "up to the first row that waits (g2's first)")
        // The waiting rows of g2 go once acknowledged, without an index entry.
        try store.commit([.session(SessionRecord(member: "g2", name: "tab", cursor: 3, topics: []))])
        store.eventIndexRoundRows = 100
        step = try prune(["g1": 1, "g2": 3])
        XCTAssertEqual(step.through, ["g2": 3])
        XCTAssertFalse(step.more)
        XCTAssertEqual(try store.events(member: "g2", after: 0, limit: 10), [])
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [2, 3])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        // A round of steps of two entries: each member's together, in the index's order.
        store.eventIndexRoundRows = 4
        for _ in 0..<3 { XCTAssertEqual(try prune(["g1": 1, "g2": 3], limit: 2).through, [:]) }
        XCTAssertEqual(try indexed(), ["g1 2", "g1 3", "g3 1", "g3 2", "g3 3"])
        XCTAssertEqual(try mark(), 9, "the last row of the round")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        XCTAssertEqual(try store.events(member: "g3", after: 1, limit: 10).map(\.seq), [2, 3])
        // Indexed now, they go as acknowledged, as indexed rows do.
        try store.commit([.session(SessionRecord(member: "g3", name: "tab", cursor: 2, topics: []))])
        XCTAssertEqual(try prune(["g1": 1, "g2": 3, "g3": 2]).through, ["g3": 2])
        XCTAssertEqual(try indexed(), ["g1 2", "g1 3", "g3 3"])
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(try reopened.events(member: "g1", after: 0, limit: 10).map(\.seq), [2, 3])
        XCTAssertEqual(try reopened.events(member: "g3", after: 0, limit: 10).map(\.seq), [3])
        XCTAssertEqual(try reopened.load().firstRetained, ["g1": 2, "g3": 3])
    }

    /// A few rows that stay, with many that go after them, get a round too: the mark, and
    /// the rows listed above it, do not stay behind for as long as those few wait.
    func testAFewRowsThatStayDoNotHoldTheMarkBack() throws {
        let store = try SQLiteStore(path: path)
        store.eventIndexRoundRows = 10
        try store.commit(guardians(["g1", "g2"]))
        try store.commit([event("g1", 1, at: 1)])
        for seq in Int64(1)...50 { try store.commit([event("g2", seq, at: seq)]) }
        try store.commit([.session(SessionRecord(member: "g2", name: "tab", cursor: 50, topics: []))])
        func prune() throws -> PruneStep {
            try store.prune(
                olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0, "g2": 50], settledThrough: StoreContractTests.later,
                limit: 20)
        }
        var step = try prune()
        XCTAssertEqual(step.through, ["g2": 19])
        XCTAssertEqual(try store.db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'"), 0, "held at g1's row")
        var steps = 1
        while step.more {
            step = try prune()
            steps += 1
            XCTAssertLessThan(steps, 10, "pruning must end")
        }
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM eventIndex"), 1, "g1's row, in a round")
        XCTAssertEqual(try store.db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'"), 51)
        XCTAssertEqual(store.tail.withLock { $0.rows.count }, 0, "nothing listed")
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [1])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
    }

    /// A round cut short (the relay killed between its steps) goes on at the next start:
    /// the rows it had indexed are not indexed twice, none is missed, and the mark then
    /// passes them all.
    func testARoundCutShortGoesOnAtTheNextStart() throws {
        let store = try SQLiteStore(path: path)
        store.eventIndexRoundRows = 1
        try store.commit(guardians(["g1", "g2"]))
        for seq in Int64(1)...4 { try store.commit([event("g1", seq, at: seq), event("g2", seq, at: seq)]) }
        let acknowledged: [String: Int64] = ["g1": 0, "g2": 0]
        XCTAssertTrue(
            try store.prune(
                olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: StoreContractTests.later, limit: 100
            )
            .more)
        // The round's first step: three of g1's four rows.
        _ = try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: StoreContractTests.later, limit: 3)
        XCTAssertEqual(try store.db.scalar("SELECT count(*) FROM eventIndex"), 3)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [], "rows above the mark may be in the index")
        try store.commit([event("g1", 5, at: 5)])  // after the round's end: looked at later

        let reopened = try SQLiteStore(path: path)
        reopened.eventIndexRoundRows = 100
        XCTAssertEqual(try reopened.events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3, 4, 5])
        var steps = 0
        while try reopened.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: StoreContractTests.later, limit: 3
        ).more {
            steps += 1
            XCTAssertLessThan(steps, 10, "pruning must end")
        }
        XCTAssertEqual(try reopened.db.scalar("SELECT count(*) FROM eventIndex"), 8, "each row of the round once")
        XCTAssertEqual(try reopened.db.scalar("SELECT value FROM settings WHERE key = 'indexedThroughRow'"), 8)
        XCTAssertNil(try reopened.db.scalar("SELECT value FROM settings WHERE key = 'indexRoundThrough'") as Int64?)
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        for member in ["g1", "g2"] {
            XCTAssertEqual(
                try SQLiteStore(path: path).events(member: member, after: 0, limit: 10).map(\.seq),
                member == "g1" ? [1, 2, 3, 4, 5] : [1, 2, 3, 4])
        }
    }

    /// A round cut short whose end was a row since dropped (the top id): a row committed
    /// after the restart gets an id above the round's end, so it is looked at, and neither
    /// hidden below the mark nor its seq given again.
    func testARowCommittedAfterARestartMidRoundIsAboveTheRound() throws {
        let store = try SQLiteStore(path: path)
        store.eventIndexRoundRows = 2
        try store.commit(guardians(["g1", "g2"], cursors: ["g2": 1]))
        try store.commit([event("g1", 1, at: 1)])  // row 1: stays
        try store.commit([event("g1", 2, at: 2)])  // row 2: stays
        try store.commit([event("g2", 1, at: 3)])  // row 3: acknowledged, goes
        let acknowledged: [String: Int64] = ["g1": 0, "g2": 1]
        func prune(_ s: SQLiteStore, limit: Int) throws -> PruneStep {
            try s.prune(
                olderThan: Timestamp(milliseconds: 0), acknowledged: acknowledged, settledThrough: StoreContractTests.later, limit: limit)
        }
        var step = try prune(store, limit: 100)
        XCTAssertEqual(step.through, ["g2": 1])
        XCTAssertTrue(step.more, "two rows wait: a round is due")
        _ = try prune(store, limit: 1)  // the round's first step: g1's row 1 only
        XCTAssertEqual(try store.db.scalar("SELECT value FROM settings WHERE key = 'indexRoundThrough'"), 3)

        let reopened = try SQLiteStore(path: path)
        reopened.eventIndexRoundRows = 2
        XCTAssertEqual(reopened.eventPosition, 3, "ids go on above the round's end")
        try reopened.commit([event("g2", 2, at: 4)])
        var steps = 0
        repeat {
            step = try prune(reopened, limit: 1)
            steps += 1
        } while step.more && steps < 20
        XCTAssertEqual(try reopened.events(member: "g2", after: 1, limit: 10).map(\.seq), [2])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        let again = try SQLiteStore(path: path)
        XCTAssertEqual(try again.events(member: "g2", after: 1, limit: 10).map(\.seq), [2], "after another restart")
        XCTAssertEqual(try again.load().heads["g2"], 2)
        XCTAssertThrowsError(try again.commit([event("g2", 2, at: 5)]), "a seq is never stored twice")
        XCTAssertThrowsError(try again.commit([event("g2", 3, at: 5), event("g2", 3, at: 5)]), "nor twice in one commit")
        XCTAssertThrowsError(try again.commit([event("g2", 3, at: 5), event("g1", 3, at: 5), event("g2", 5, at: 5)]), "nor with a hole")
        try again.commit([event("g2", 3, at: 5), event("g1", 3, at: 5), event("g2", 4, at: 5)])
        XCTAssertEqual(try again.events(member: "g2", after: 2, limit: 10).map(\.seq), [3, 4], "nothing of a refused commit is kept")
    }

    /// Every row dropped (an idle relay): the next row's id is still above the mark, so
    /// pruning, a restart and `check` all see it (SQLite would give the dropped top id again).
    func testARowAfterEveryRowWasDroppedIsNotHiddenBelowTheMark() throws {
        let store = try SQLiteStore(path: path)
        try store.commit(guardians(["g1"]))
        for seq in Int64(1)...3 { try store.commit([event("g1", seq, at: seq * 1000)]) }
        try store.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 3, topics: []))])
        let step = try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 3], settledThrough: StoreContractTests.later, limit: 100)
        XCTAssertEqual(step.through, ["g1": 3])
        try store.commit([event("g1", 4, at: 4000)])
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(try reopened.events(member: "g1", after: 3, limit: 10).map(\.seq), [4], "after a restart")
        XCTAssertEqual(try reopened.load().heads["g1"], 4, "after a restart, the next seq is 5")
        for seq in Int64(5)...7 { try store.commit([event("g1", seq, at: seq * 1000)]) }
        _ = try store.prune(
            olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 3], settledThrough: StoreContractTests.later, limit: 100)
        XCTAssertEqual(try store.events(member: "g1", after: 3, limit: 10).map(\.seq), [4, 5, 6, 7], "after a step")
    }

    /// A commit's rows are not in the order of their times (a row's time is its last
    /// event's; a clock set back does the same): a step takes every row up to the settled
    /// position, by position alone, and drops only what may go.
    func testRowsOutOfTimeOrderAreEachLookedAtAndOnlyTheAcknowledgedGo() throws {
        let store = try SQLiteStore(path: path)
        try store.commit(guardians(["g1", "g2"], cursors: ["g2": 2]))
        try store.commit([event("g2", 1, at: 900)])
        // One batch of three turns: g1's row ends at 5000, g2's after it at 1500.
        try store.commit([event("g1", 1, at: 1000), event("g2", 2, at: 1500), event("g1", 2, at: 5000)])
        let settled = store.eventPosition
        try store.commit([event("g1", 3, at: 800)])  // the clock set back; not settled yet
        let step = try store.prune(olderThan: Timestamp(milliseconds: 0), acknowledged: ["g2": 2], settledThrough: settled, limit: 100)
        XCTAssertEqual(step.through, ["g2": 2], "g2's rows, on both sides of g1's")
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3], "g1 acknowledged nothing")
        XCTAssertEqual(try SQLiteStore.check(databaseAt: path), [])
        let s = try SQLiteStore(path: path).load()
        XCTAssertEqual(s.heads["g1"], 3)
        XCTAssertEqual(s.heads["g2"], 2)
        XCTAssertEqual(try SQLiteStore(path: path).events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3])
    }
}
