// The SQLite store's own layout: committed changes survive a restart before any
// checkpoint, a checkpoint moves them into the tables unchanged, the binary forms read
// back exactly what was written, events live in per-member batches that prune exactly,
// and an older schema is converted.

import CSQLite
import Foundation
import RelayProtocol
@testable import RelayStore
import XCTest

final class SQLiteStoreTests: XCTestCase {
    private var dir: URL!

    override func setUp() {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("journal-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(at: dir) }

    private var path: String { dir.appendingPathComponent("relay.db").path }

    private func state(of q: QuestionRecord) -> QuestionState {
        QuestionState(key: q.key, status: q.status, attempt: q.attempt, outcome: q.outcome, row: q.row)
    }

    private func question(_ n: Int) throws -> QuestionRecord {
        let q: JSONObject = [
            "id": .string(UUID().uuidString),
            "topic": .object([
                "kind": "communication",
                "personInformation": [.object(["handle": .object(["value": .string("+1 555 \(n)"), "kind": "phoneNumber"])])],
            ]),
        ]
        return QuestionRecord(
            content: try QuestionContent.validate(q, now: Timestamp(milliseconds: 0)), child: "c1", family: "fam",
            status: .pending, attempt: 1, createdAt: Timestamp(milliseconds: Int64(n)), row: Int64(n))
    }

    /// Several turns of every kind of change, committed and never checkpointed.
    private func writeTurns(_ store: SQLiteStore) throws -> (answered: QuestionRecord, forgotten: String, pending: QuestionRecord) {
        store.saveFamily("fam")
        store.saveMember(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1, 2]))
        store.saveMember(MemberRecord(id: "g1", family: "fam", role: .guardian, tokenHash: [3]))
        try store.commit()
        var answered = try question(1)
        let forgotten = try question(2)
        let pending = try question(3)
        for q in [answered, forgotten, pending] { store.saveQuestion(q) }
        store.appendEvent(EventRecord(member: "g1", seq: 1, at: Timestamp(milliseconds: 1), topic: nil, frame: Array("q1".utf8)))
        store.saveSession(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: []))
        try store.commit()
        answered.status = .answered
        answered.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 7))
        store.saveQuestionState(answered)
        store.deleteQuestion(forgotten)
        let h = NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555 1")!
        store.saveKnownHandle(KnownHandleRecord(child: "c1", handle: h, permanent: true, until: nil, actions: ["message"]))
        store.appendEvent(
            EventRecord(member: "c1", seq: 1, at: Timestamp(milliseconds: 7), topic: .communication, frame: Array("r1".utf8)))
        store.saveSession(SessionRecord(member: "g1", name: "tab", cursor: 1, topics: [.communication]))
        try store.commit()
        return (answered, forgotten.id, pending)
    }

    private func check(_ s: StoreSnapshot, _ w: (answered: QuestionRecord, forgotten: String, pending: QuestionRecord), _ when: String) {
        XCTAssertEqual(s.families, ["fam"], when)
        XCTAssertEqual(Set(s.members.map(\.id)), ["c1", "g1"], when)
        XCTAssertEqual(s.questions.first { $0.id == w.answered.id }, w.answered, when)
        XCTAssertEqual(s.questions.first { $0.id == w.pending.id }, w.pending, when)
        XCTAssertFalse(s.questions.contains { $0.id == w.forgotten }, when)
        XCTAssertEqual(s.knownHandles.map(\.handle.value), ["+15551"], when)
        XCTAssertEqual(s.sessions, [SessionRecord(member: "g1", name: "tab", cursor: 1, topics: [.communication])], when)
        XCTAssertEqual(s.heads, ["g1": 1, "c1": 1], when)
    }

    func testCommittedChangesSurviveARestartBeforeAnyCheckpoint() throws {
        let written = try writeTurns(try SQLiteStore(path: path))
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(reopened.journaledChanges, 13, "every change of the three commits, from the journal")
        check(try reopened.load(), written, "from the journal")
        XCTAssertEqual(try reopened.events(member: "c1", after: 0, limit: 10).map(\.frame), [Array("r1".utf8)])
        XCTAssertEqual(try reopened.oldestEventSeq(member: "g1"), 1)

        try reopened.checkpoint()
        let after = try SQLiteStore(path: path)
        XCTAssertEqual(after.journaledChanges, 0, "after a checkpoint the journals hold nothing the tables lack")
        check(try after.load(), written, "from the tables")
        XCTAssertEqual(try after.events(member: "c1", after: 0, limit: 10).map(\.frame), [Array("r1".utf8)])
        XCTAssertEqual(
            try after.events(member: "g1", after: 0, limit: 10), [], "acknowledged by g1's only durable session: not written")
    }

    /// The question event as the relay writes it: the question's content but for its
    /// closing brace, inside the event.
    private func questionEvent(_ q: QuestionRecord, seq: Int64) -> EventRecord {
        let frame =
            Array(#"{"type":"question","seq":\#(seq),"question":"#.utf8) + q.content.encoded.dropLast()
            + Array(#","child":"c1","status":"pending"}}"#.utf8)
        return EventRecord(member: "g1", seq: seq, at: Timestamp(milliseconds: seq), topic: nil, frame: frame)
    }

    private func journalSize(_ store: SQLiteStore) throws -> Int {
        try FileManager.default.attributesOfItem(atPath: store.currentJournalPath)[.size] as! Int
    }

    /// A question saved right after the event that carries its content is journaled as a
    /// reference to that copy, and reads back whole from the journal and from the tables;
    /// one saved after another question's event, or after none, is journaled whole.
    func testAQuestionSavedAfterItsEventKeepsItsContentOnceInTheJournal() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        let (once, twice, alone, other) = (try question(1), try question(2), try question(3), try question(4))  // rows in order of saving

        var size = try journalSize(store)
        func growth() throws -> Int {
            let before = size
            size = try journalSize(store)
            return size - before
        }
        store.appendEvent(questionEvent(once, seq: 1))
        store.saveQuestion(once)
        try store.commit()
        let referenced = try growth()
        store.saveQuestion(twice)
        store.appendEvent(questionEvent(twice, seq: 2))
        try store.commit()
        let whole = try growth()
        XCTAssertGreaterThanOrEqual(whole - referenced, once.content.encoded.count - 8, "the content is not journaled twice")

        store.appendEvent(questionEvent(other, seq: 3))
        store.saveQuestion(alone)  // after another question's event: its content is not there
        try store.commit()
        store.saveQuestion(other)  // in a later turn than its event
        try store.commit()
        XCTAssertGreaterThanOrEqual(try growth(), 2 * alone.content.encoded.count, "both journaled whole")

        let expected = [once, twice, alone, other]
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(try reopened.load().questions, expected, "from the journal")
        XCTAssertEqual(
            try reopened.events(member: "g1", after: 0, limit: 10).map(\.frame),
            [1, 2, 3].map { questionEvent([once, twice, other][$0 - 1], seq: Int64($0)).frame },
            "the events keep their frames whole")
        try reopened.checkpoint()
        XCTAssertEqual(try SQLiteStore(path: path).load().questions, expected, "from the tables")
    }

    /// A question written whole again in a later batch (asked again after a cancel) takes
    /// the place of its row: the tables never hold two of it.
    func testAQuestionAskedAgainInALaterBatchKeepsOneRow() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        var q = try question(1)
        store.saveQuestion(q)
        try store.commit()
        try store.checkpoint()
        q.status = .cancelled
        store.saveQuestionState(q)
        try store.commit()
        try store.checkpoint()
        q.status = .pending
        q.attempt = 2
        store.saveQuestion(q)
        try store.commit()
        try store.checkpoint()
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(reopened.journaledChanges, 0)
        XCTAssertEqual(try reopened.load().questions, [q])
    }

    /// The tables' rows for questions, by key, with their ids (read with SQLite itself).
    private func storedRows() throws -> [Int64: String] {
        let db = try SQLiteDatabase(path: path)
        var rows: [Int64: String] = [:]
        try db.run("SELECT key, id FROM questions") { r in rows[r.int(0)] = r.text(1) }
        return rows
    }

    /// Each question is written, updated and deleted by the row it was given, loads with
    /// that row, and the writer never has to find a question by its id.
    func testQuestionsAreWrittenByTheirRowsAndLoadWithThem() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        var (a, b, c) = (try question(3), try question(5), try question(8))
        for q in [a, b, c] { store.saveQuestion(q) }
        try store.commit()
        try store.checkpoint()
        a.status = .answered
        a.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 9))
        store.saveQuestionState(a)
        store.deleteQuestion(b)
        try store.commit()
        try store.checkpoint()
        XCTAssertEqual(try storedRows(), [3: a.id, 8: c.id])
        XCTAssertFalse(store.hasFoundQuestionsByID)

        c.status = .cancelled
        store.saveQuestionState(c)
        try store.commit()  // journaled only: read back at load
        let s = try SQLiteStore(path: path).load()
        XCTAssertEqual(s.questions, [a, c])
        XCTAssertEqual(s.questions.map(\.row), [3, 8])
        XCTAssertEqual(s.lastQuestionRow, 8)
    }

    /// Forgotten and asked again within one batch, a question has a new row: the old row is
    /// deleted all the same, and the tables hold the question once.
    func testAQuestionForgottenAndAskedAgainInOneBatchKeepsOnlyItsNewRow() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        var q = try question(1)
        q.status = .answered
        store.saveQuestion(q)
        try store.commit()
        try store.checkpoint()
        store.deleteQuestion(q)
        q.status = .pending
        q.row = 2
        store.saveQuestion(q)
        try store.commit()
        try store.checkpoint()
        XCTAssertEqual(try storedRows(), [2: q.id])
        XCTAssertEqual(try SQLiteStore(path: path).load().questions.map(\.row), [2])
    }

    /// A journal written before questions had rows (tags 3, 4 and 5, as an older relay left
    /// it at a crash) is still read and written: the writer finds those questions by id and
    /// gives new ones keys above the table's, in room the snapshot keeps free of new rows.
    func testAJournalWrittenBeforeQuestionsHadRowsIsReadAndWritten() throws {
        /// `change` as an older relay journaled it: its tag, and no row after it.
        func old(_ change: Change, tag: Int64) -> (inout ByteWriter) -> Void {
            { w in
                var new = ByteWriter()
                change.write(into: &new)
                XCTAssertEqual(Int64(new.bytes[0]) >> 1, tag + (tag == 3 ? 10 : 11), "one byte, the tag with a row")
                w.int(tag)
                new.bytes.dropFirst().dropLast().withUnsafeBufferPointer { w.append($0) }  // the row, 0, is one byte
            }
        }
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        var kept = try question(1)
        store.saveQuestion(kept)
        try store.commit()
        try store.checkpoint()

        var unnumbered = [try question(2), try question(3)]
        for i in unnumbered.indices { unnumbered[i].row = 0 }
        kept.status = .answered
        kept.outcome = Outcome(choice: .decline, guardian: "g1", answeredAt: Timestamp(milliseconds: 4))
        var stateOnly = state(of: kept)
        stateOnly.row = 0
        store.record(old(.question(unnumbered[0]), tag: 3))
        store.record(old(.question(unnumbered[1]), tag: 3))
        store.record(old(.questionState(stateOnly), tag: 4))
        store.record(old(.forgetQuestion(unnumbered[1].key, row: 0), tag: 5))
        try store.commit()  // and the relay stops without a checkpoint

        let upgraded = try SQLiteStore(path: path)
        let s = try upgraded.load()
        XCTAssertEqual(s.questions, [kept, unnumbered[0]])
        XCTAssertEqual(s.questions.map(\.row), [1, 0])
        XCTAssertGreaterThanOrEqual(s.lastQuestionRow, 3, "room for the two asked without rows")
        var next = try question(4)
        next.row = s.lastQuestionRow + 1
        upgraded.saveQuestion(next)
        try upgraded.commit()
        try upgraded.checkpoint()
        XCTAssertTrue(upgraded.hasFoundQuestionsByID)
        let rows = try storedRows()
        XCTAssertEqual(Set(rows.values), [kept.id, unnumbered[0].id, next.id], "each once, none lost to another's key")
        XCTAssertEqual(rows[1], kept.id)
        XCTAssertEqual(rows[next.row], next.id)
        let reloaded = try SQLiteStore(path: path).load()
        XCTAssertEqual(reloaded.questions, [kept, unnumbered[0], next])
        XCTAssertEqual(reloaded.questions.last?.row, next.row)
    }

    /// An event that every durable session of its member has acknowledged is not written to
    /// the tables (the contract lets it be dropped), but its member's head is, and pruning
    /// never lowers a head.
    func testEventsEveryDurableSessionAcknowledgedAreNotWrittenButTheirHeadIs() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        func event(_ member: String, _ seq: Int64) {
            store.appendEvent(EventRecord(member: member, seq: seq, at: Timestamp(milliseconds: seq), topic: nil, frame: [UInt8(seq)]))
        }
        func cursor(_ member: String, _ name: String, _ seq: Int64) {
            store.saveSession(SessionRecord(member: member, name: name, cursor: seq, topics: []))
        }
        event("m", 1)
        event("m", 2)
        try store.commit()
        try store.checkpoint()  // m has no durable session yet: both written
        store.checkpointThreshold = 10
        cursor("g1", "tab", 0)
        cursor("g1", "pad", 0)
        cursor("m", "tab", 0)
        for seq: Int64 in 1...5 { event("g1", seq) }
        event("m", 3)
        event("m", 4)
        cursor("g1", "tab", 4)
        cursor("g1", "pad", 2)
        cursor("m", "tab", 4)
        try store.commit()
        try store.checkpoint()
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [3, 4, 5], "the slower session has 2")
        XCTAssertEqual(try store.events(member: "m", after: 0, limit: 10).map(\.seq), [1, 2])
        XCTAssertEqual(try store.pruneEvents(olderThan: Timestamp(milliseconds: 0), acknowledged: ["m": 4]), 2)
        let reopened = try SQLiteStore(path: path).load()
        XCTAssertEqual(reopened.heads["m"], 4, "not the highest seq left in the tables before pruning")
    }

    /// Acks noted after a batch was handed over (cursors are journaled lazily) leave out the
    /// events they cover when the batch is written, and their cursors go into the tables
    /// with it; an older cursor journaled in the meantime never takes a cursor back.
    func testAcksNotedAfterTheHandOverLeaveOutTheirEventsAndStoreTheirCursors() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        store.saveSession(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: []))
        store.saveSession(SessionRecord(member: "c1", name: "tab", cursor: 0, topics: []))
        try store.commit()
        try store.checkpoint()
        store.checkpointThreshold = 4
        store.writer.hold(true)
        for seq: Int64 in 1...4 {
            store.appendEvent(EventRecord(member: "g1", seq: seq, at: Timestamp(milliseconds: seq), topic: nil, frame: [UInt8(seq)]))
        }
        store.appendEvent(EventRecord(member: "c1", seq: 1, at: Timestamp(milliseconds: 1), topic: nil, frame: [9]))
        try store.commit()  // hands the five events over; the writer waits
        store.saveSession(SessionRecord(member: "g1", name: "tab", cursor: 1, topics: []))  // a periodic flush
        try store.commit()
        store.noteCursor(member: "g1", session: "tab", cursor: 3)
        store.noteCursor(member: "c1", session: "tab", cursor: 1)  // one event: not worth a row
        store.writer.hold(false)
        try store.settle(wait: true)

        let reopened = try SQLiteStore(path: path)
        let s = try reopened.load()
        XCTAssertEqual(s.sessions.first { $0.member == "g1" }?.cursor, 3, "the journal's older cursor does not take it back")
        XCTAssertEqual(s.sessions.first { $0.member == "c1" }?.cursor, 0)
        XCTAssertEqual(try reopened.events(member: "g1", after: 0, limit: 10).map(\.seq), [4])
        XCTAssertEqual(try reopened.events(member: "c1", after: 0, limit: 10).map(\.seq), [1])
        try reopened.checkpoint()  // writes the older cursor into the tables
        XCTAssertEqual(try SQLiteStore(path: path).load().sessions.first { $0.member == "g1" }?.cursor, 3)
    }

    func testABacklogOfLargeChangesIsHandedOverByItsSizeThoughTheyAreFew() throws {
        let store = try SQLiteStore(path: path)
        _ = try store.load()
        store.checkpointThreshold = 1000
        store.checkpointBytes = 100_000
        store.writer.hold(true)
        for seq: Int64 in 1...3 {
            XCTAssertNil(store.sealed, "\(seq - 1) changes of 40 KB wait in the backlog")
            let frame = [UInt8](repeating: 7, count: 40_000)
            store.appendEvent(EventRecord(member: "g1", seq: seq, at: Timestamp(milliseconds: seq), topic: nil, frame: frame))
            try store.commit()
        }
        XCTAssertEqual(store.sealed?.count, 3, "120 KB went to the writer")
        store.writer.hold(false)
        try store.settle(wait: true)
        XCTAssertEqual(store.journaledChanges, 0)
        XCTAssertEqual(try SQLiteStore(path: path).events(member: "g1", after: 0, limit: 10).map(\.seq), [1, 2, 3])
    }

    /// A batch that fails after the writer counted newer cursors leaves the writer's view
    /// of them as the tables have it, so that the retry stores the cursors it counts.
    func testABatchThatFailsLeavesTheCursorsAsTheTablesHaveThem() throws {
        do {
            let roomy = try SQLiteStore(path: path, pageSize: 4096)
            _ = try roomy.load()
            roomy.saveSession(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: []))
            try roomy.commit()
            try roomy.checkpoint()
        }
        let store = try SQLiteStore(path: path, maxPageCount: pageCount(ofDatabaseAt: path))
        _ = try store.load()
        store.checkpointThreshold = 4
        store.writer.hold(true)
        for seq: Int64 in 1...4 {
            let frame = [UInt8](repeating: 7, count: seq == 4 ? 30000 : 10)
            store.appendEvent(EventRecord(member: "g1", seq: seq, at: Timestamp(milliseconds: seq), topic: nil, frame: frame))
        }
        try store.commit()  // hands the four events over
        store.noteCursor(member: "g1", session: "tab", cursor: 3)
        store.writer.hold(false)
        XCTAssertThrowsError(try store.settle(wait: true), "the last event, unacknowledged, does not fit")
        store.noteCursor(member: "g1", session: "tab", cursor: 4)
        try store.checkpoint()  // all four acknowledged: the cursor and the head are written, no event
        XCTAssertEqual(try SQLiteStore(path: path).load().sessions.first?.cursor, 4)
    }

    func testACommitPastTheThresholdHandsTheBacklogToTheWriter() throws {
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 4
        store.writer.hold(true)  // the batch stays in the writer's hands until the checks below
        let written = try writeTurns(store)  // the commit that brings the backlog to 8 changes hands them over
        for n in 0..<3 {
            store.appendEvent(
                EventRecord(member: "c1", seq: Int64(n + 2), at: Timestamp(milliseconds: 9), topic: nil, frame: [UInt8(n)]))
        }
        try store.commit()
        XCTAssertEqual(store.journaledChanges, 16, "8 handed over and not yet written, 8 in the backlog")
        XCTAssertFalse(store.writer.isIdle)
        XCTAssertEqual(
            try store.events(member: "c1", after: 0, limit: 10).map(\.seq), [1, 2, 3, 4],
            "events come back in order from the tables, the writer's hands and the backlog together")
        XCTAssertEqual(try store.events(member: "c1", after: 1, limit: 2).map(\.seq), [2, 3])
        store.writer.hold(false)
        try store.settle(wait: true)
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(reopened.journaledChanges, 8, "the first 8 changes are in the tables, the last 8 in the journal")
        let s = try reopened.load()
        XCTAssertEqual(s.questions.first { $0.id == written.answered.id }, written.answered)
        XCTAssertEqual(s.heads, ["g1": 1, "c1": 4])
        XCTAssertEqual(try reopened.events(member: "c1", after: 0, limit: 10).map(\.seq), [1, 2, 3, 4])
    }

    func testTheNextBacklogHasRoomForTwiceTheBatchHandedOver() throws {
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 100
        store.writer.hold(true)
        for n in 0..<100 { store.saveQuestion(try question(n)) }
        try store.commit()  // hands the 100 questions over
        let handedOver = try XCTUnwrap(store.sealed).bytes.count
        XCTAssertEqual(store.backlog.count, 0)
        XCTAssertGreaterThanOrEqual(store.backlog.bytes.capacity, 2 * handedOver)
        store.writer.hold(false)
        try store.settle(wait: true)
    }

    /// Generations a little larger each time keep the two buffers they alternate between:
    /// a buffer that moved would be new pages for the journal to fault in.
    func testBacklogsALittleLargerEachTimeKeepTheirBuffers() throws {
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 100
        var capacities: [Int] = []
        var n = 0
        for generation in 0..<8 {
            for _ in 0..<(100 + 5 * generation) {
                store.saveQuestion(try question(n))
                n += 1
            }
            try store.commit()  // hands the generation over
            try store.settle(wait: true)
            capacities.append(store.backlog.bytes.capacity)
        }
        XCTAssertEqual(capacities[4...], capacities[2..<6], "the buffers of generations 2 and 3, over and over: \(capacities)")
    }

    func testATornRecordAtTheEndIsCutAndWritingGoesOn() throws {
        let first = try SQLiteStore(path: path)
        let written = try writeTurns(first)
        let journal = URL(fileURLWithPath: first.currentJournalPath)
        let whole = try Data(contentsOf: journal)
        // A record cut off mid-write: a length that promises more than is there.
        try (whole + Data([200, 0, 0, 0, 1, 2, 3])).write(to: journal)
        let store = try SQLiteStore(path: path)
        check(try store.load(), written, "with a torn tail")
        store.saveFamily("later")
        try store.commit()
        XCTAssertEqual(try SQLiteStore(path: path).load().families, ["fam", "later"], "appended after the cut")
        // A record whose checksum fails is not read either.
        var damaged = try Data(contentsOf: journal)
        damaged[damaged.count - 1] ^= 0xFF
        try damaged.write(to: journal)
        XCTAssertEqual(try SQLiteStore(path: path).load().families, ["fam"])
    }

    func testAJournalTheTablesAlreadyHoldIsNotReadAgain() throws {
        let store = try SQLiteStore(path: path)
        let written = try writeTurns(store)
        let journal = store.currentJournalPath
        try store.checkpoint()
        XCTAssertGreaterThan(try Data(contentsOf: URL(fileURLWithPath: journal)).count, 100, "the written journal keeps its bytes")
        let reopened = try SQLiteStore(path: path)
        XCTAssertEqual(reopened.journaledChanges, 0)
        check(try reopened.load(), written, "after a restart")
        reopened.appendEvent(EventRecord(member: "c1", seq: 2, at: Timestamp(milliseconds: 9), topic: nil, frame: [2]))
        try reopened.commit()
        try reopened.checkpoint()
        let last = try SQLiteStore(path: path)
        XCTAssertEqual(try last.events(member: "c1", after: 0, limit: 10).map(\.seq), [1, 2], "nothing written twice")
        XCTAssertEqual(try last.load().heads["c1"], 2)
    }

    func testAFailedCommitLeavesTheBacklogAsItWas() throws {
        let store = try SQLiteStore(path: path)
        let written = try writeTurns(store)
        store.saveFamily("lost")
        store.appendEvent(EventRecord(member: "c1", seq: 2, at: Timestamp(milliseconds: 9), topic: nil, frame: [9]))
        store.discardChanges()
        XCTAssertEqual(try store.events(member: "c1", after: 0, limit: 10).map(\.seq), [1])
        check(try SQLiteStore(path: path).load(), written, "after a discarded turn")
    }

    func testEveryChangeReadsBackFromItsBinaryForm() throws {
        var q = try question(4)
        q.outcome = Outcome(
            choice: Choice(id: "hour", title: "For an hour", answer: .approval, durationSeconds: 3600), guardian: "g\u{e9}",
            answeredAt: Timestamp(milliseconds: -5))
        let h = NormalizedHandle(kind: .emailAddress, rawValue: "Kim@Example.com")!
        let changes: [Change] = [
            .family("fam"),
            .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: Array(0...255), removed: true, limitsEnabled: false)),
            .question(q),
            .questionState(state(of: q)),
            .forgetQuestion(q.key, row: q.row),
            .known(KnownHandleRecord(child: "c1", handle: h, permanent: false, until: Timestamp(milliseconds: 1 << 40), actions: [])),
            .known(KnownHandleRecord(child: "c1", handle: h, permanent: true, until: nil, actions: ["message", "audioCall"])),
            .unknown("c1", h),
            .session(SessionRecord(member: "c1", name: "a.b-c", cursor: Int64.max, topics: [.communication, .significantAppUpdate])),
            .dropSessions("c1"),
            .dropSession("c1", "a.b-c"),
            .event(EventRecord(member: "c1", seq: 1, at: Timestamp(milliseconds: 3), topic: .significantAppUpdate, frame: [])),
            .event(
                EventRecord(
                    member: "g1", seq: 300, at: Timestamp(milliseconds: 3), topic: nil, frame: Array(repeating: 0xFF, count: 70_000))),
        ]
        var writer = ByteWriter()
        Change.encode(changes, into: &writer)
        let bytes = writer.bytes
        XCTAssertEqual(try Change.decode(bytes), changes)
        XCTAssertEqual(
            try JournaledChange.readAll(bytes).map { try $0.change(in: bytes) }, changes, "read in place, as the table writer reads them")
        for cut in [1, bytes.count / 2, bytes.count - 1] {
            XCTAssertThrowsError(try Change.decode(Array(bytes.prefix(cut))), "cut at \(cut)")
            XCTAssertThrowsError(try JournaledChange.readAll(Array(bytes.prefix(cut))), "cut at \(cut)")
        }
    }

    func testTheTableWriterReadsEveryStatusAndRefusesAnUnknownOne() throws {
        var q = try question(7)
        for status in QuestionStatus.allCases {
            q.status = status
            var writer = ByteWriter()
            Change.encode([.question(q), .questionState(state(of: q))], into: &writer)
            let bytes = writer.bytes
            XCTAssertEqual(
                try JournaledChange.readAll(bytes).map { try $0.change(in: bytes) }, [.question(q), .questionState(state(of: q))])
        }
        q.status = .expired
        var writer = ByteWriter()
        Change.encode([.questionState(state(of: q))], into: &writer)
        var bytes = writer.bytes
        let at = try XCTUnwrap(bytes.indices.first { bytes[$0...].starts(with: Array("expired".utf8)) })
        bytes[at + 6] = UInt8(ascii: "x")  // "expirex": as long, and no status
        XCTAssertThrowsError(try JournaledChange.readAll(bytes))
    }

    func testFoldingWritesEachQuestionAndSessionOnceWithItsLastState() throws {
        var a = try question(5)
        let b = try question(6)
        let pendingA = a
        a.status = .answered
        a.outcome = Outcome(choice: .decline, guardian: "g1", answeredAt: Timestamp(milliseconds: 8))
        func session(_ name: String, _ cursor: Int64) -> Change {
            .session(SessionRecord(member: "c1", name: name, cursor: cursor, topics: []))
        }
        let changes = [
            Change.question(pendingA), session("phone", 1), .family("f"), .questionState(state(of: a)), session("pad", 1),
            .question(b), session("phone", 4), .forgetQuestion(b.key, row: b.row), .questionState(state(of: b)), session("phone", 5),
            .dropSessions("c1"), session("phone", 0), session("phone", 2), session("pad", 7), .dropSession("c1", "pad"),
            session("pad", 3),
        ]
        var writer = ByteWriter()
        Change.encode(changes, into: &writer)
        var folding = FoldedChanges()
        for change in try JournaledChange.readAll(writer.bytes) { try folding.add(change, in: writer.bytes) }
        let folded = try folding.changes.map { try $0.change(in: writer.bytes) }
        XCTAssertEqual(
            folded,
            [
                .question(a), session("phone", 5), .family("f"), session("pad", 1), .forgetQuestion(b.key, row: b.row), .dropSessions("c1"),
                session("phone", 2), session("pad", 7), .dropSession("c1", "pad"), session("pad", 3),
            ])
        var s = StoreSnapshot()
        s.apply(folded)
        var t = StoreSnapshot()
        t.apply(changes)
        XCTAssertEqual(s.questions, t.questions)
        XCTAssertEqual(s.sessions, t.sessions)
    }

    func testBatchesPruneToTheExactEventByTimeAndByAcknowledgement() throws {
        let store = try SQLiteStore(path: path)
        for seq in 1...10 {
            store.appendEvent(
                EventRecord(member: "g1", seq: Int64(seq), at: Timestamp(milliseconds: Int64(seq) * 100), topic: nil, frame: [UInt8(seq)]))
        }
        try store.commit()
        try store.checkpoint()  // one batch of ten
        XCTAssertEqual(try store.pruneEvents(olderThan: Timestamp(milliseconds: 250), acknowledged: ["g1": 6]), 6)
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 100).map(\.seq), [7, 8, 9, 10])
        XCTAssertEqual(try store.oldestEventSeq(member: "g1"), 7)
        XCTAssertEqual(try store.events(member: "g1", after: 8, limit: 1).map(\.frame), [[9]])
        XCTAssertEqual(try store.pruneEvents(olderThan: Timestamp(milliseconds: 2000), acknowledged: [:]), 4)
        XCTAssertNil(try store.oldestEventSeq(member: "g1"))
        XCTAssertEqual(try SQLiteStore(path: path).load().heads["g1"], 10, "the head outlives its events")
    }

    func testASchemaTwoDatabaseIsConverted() throws {
        var db: OpaquePointer?
        XCTAssertEqual(sqlite3_open(path, &db), SQLITE_OK)
        let old = SQLiteStore.migrations.prefix(2).map(\.sql).joined(separator: "\n")
        let q = try question(9)
        let content = String(decoding: q.content.encoded, as: UTF8.self).replacingOccurrences(of: "'", with: "''")
        var sql = """
            CREATE TABLE migrations(version INTEGER PRIMARY KEY, name TEXT NOT NULL, appliedAt INTEGER NOT NULL);
            \(old)
            INSERT INTO migrations VALUES(1, 'initial schema', 0), (2, 'journal generation', 0);
            INSERT INTO families VALUES('fam');
            INSERT INTO members VALUES('g1', 'fam', 'guardian', x'00', 0, 1), ('c1', 'fam', 'child', x'00', 0, 1);
            INSERT INTO questions VALUES('\(q.id)', 'c1', 'fam', 'pending', 1, 9, '\(content)', NULL);
            """
        for seq in 1...300 { sql += "INSERT INTO events VALUES('g1', \(seq), \(seq), NULL, x'\(String(format: "%02x", seq % 256))');\n" }
        sql += "INSERT INTO events VALUES('c1', 1, 5, 'communication', x'ff');"
        XCTAssertEqual(sqlite3_exec(db, sql, nil, nil, nil), SQLITE_OK, String(cString: sqlite3_errmsg(db)))
        sqlite3_close(db)

        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.schemaVersion(), 3)
        let s = try store.load()
        XCTAssertEqual(s.questions, [q])
        XCTAssertEqual(s.heads, ["g1": 300, "c1": 1])
        let events = try store.events(member: "g1", after: 0, limit: 1000)
        XCTAssertEqual(events.map(\.seq), Array(1...300))
        XCTAssertEqual(events.last?.frame, [UInt8(300 % 256)])
        XCTAssertEqual(try store.events(member: "c1", after: 0, limit: 10).first?.topic, .communication)
        // The converted question is updated in place (by the row it was loaded with) and the
        // next one follows it.
        var answered = try XCTUnwrap(s.questions.first)
        XCTAssertEqual(answered.row, 1)
        XCTAssertEqual(s.lastQuestionRow, 1)
        answered.status = .answered
        answered.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 10))
        store.saveQuestionState(answered)
        let next = try question(10)
        store.saveQuestion(next)
        try store.commit()
        try store.checkpoint()
        XCTAssertEqual(try SQLiteStore(path: path).load().questions, [answered, next])
    }

    func testTheTableWriterGivesWayToTheLoopOnContendedCores() throws {
        let mine = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0)  // this thread's nice value
        guard mine + TableWriter.niceness <= 19 else { throw XCTSkip("the tests run at nice \(mine): no room below") }
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 1
        store.saveFamily("fam")
        try store.commit()  // hands the batch to the writer's thread
        try store.settle(wait: true)
        // Each thread's nice value: the 19th field of its stat, the 17th after the command's closing parenthesis.
        let niceValues = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap { task -> Int32? in
            guard let stat = try? String(contentsOfFile: "/proc/self/task/\(task)/stat", encoding: .utf8),
                let end = stat.lastIndex(of: ")")
            else { return nil }
            return Int32(stat[stat.index(after: end)...].split(separator: " ")[16])
        }
        XCTAssertTrue(niceValues.contains(mine + TableWriter.niceness), "\(niceValues)")
    }

    func testTheTableWritersThreadIsNamedForTheToolsThatListThreads() throws {
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 1
        store.saveFamily("fam")
        try store.commit()  // hands the batch to the writer's thread
        try store.settle(wait: true)
        let names = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").compactMap {
            try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8).trimmingCharacters(in: .newlines)
        }
        XCTAssertTrue(names.contains(TableWriter.threadName), "\(names)")
    }

    func testTheTableWriterOffersItsCoreDuringALongBatch() throws {
        let store = try SQLiteStore(path: path)
        store.checkpointThreshold = 2000
        store.saveFamily("fam")
        for n in 1...2000 { store.saveQuestion(try question(n)) }
        let start = monotonicNanos()
        try store.commit()  // hands the batch to the writer's thread
        try store.settle(wait: true)
        let took = monotonicNanos() - start
        XCTAssertEqual(try SQLiteStore(path: path).load().questions.count, 2000)
        try XCTSkipIf(took < 3 * TableWriter.yieldAfterNanos, "the batch was written in \(took) ns: too fast to tell")
        XCTAssertGreaterThanOrEqual(store.writer.yields, 1, "a batch written in \(took / 1000) µs never gave way")
    }

    func testABatchTheTablesCannotTakeIsKeptAndWrittenLater() throws {
        _ = try SQLiteStore(path: path, pageSize: 4096)  // the schema, uncapped, in pages as small as the journal's
        let pages = pageCount(ofDatabaseAt: path)
        // Room for one page more in the tables, and 4 KiB × (pages + 1) in each journal.
        let store = try SQLiteStore(path: path, maxPageCount: pages + 1)
        store.checkpointThreshold = 1
        for seq in 1...10 {
            store.appendEvent(
                EventRecord(
                    member: "g1", seq: Int64(seq), at: Timestamp(milliseconds: 1), topic: nil, frame: Array(repeating: 7, count: 3000)))
        }
        XCTAssertLessThan(30_000, (pages + 1) * 4096, "the journal has room for them")
        store.writer.hold(true)
        try store.commit()  // hands the ten events to the writer, which cannot fit them
        store.saveFamily("fam")
        try store.commit()
        store.writer.hold(false)
        XCTAssertThrowsError(try store.settle(wait: true)) { XCTAssertTrue(($0 as? SQLiteError)?.isFull == true, "\($0)") }
        XCTAssertEqual(store.journaledChanges, 11, "the batch is back in the backlog")
        XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 100).count, 10)
        XCTAssertThrowsError(try store.checkpoint(), "the retry writes all eleven, which still do not fit") {
            XCTAssertTrue(($0 as? SQLiteError)?.isFull == true, "\($0)")
        }
        // With room again, everything is there and goes into the tables.
        let roomy = try SQLiteStore(path: path)
        XCTAssertEqual(try roomy.load().families, ["fam"])
        XCTAssertEqual(roomy.journaledChanges, 11)
        try roomy.checkpoint()
        let after = try SQLiteStore(path: path)
        XCTAssertEqual(after.journaledChanges, 0)
        XCTAssertEqual(try after.events(member: "g1", after: 0, limit: 100).count, 10)
    }
}
