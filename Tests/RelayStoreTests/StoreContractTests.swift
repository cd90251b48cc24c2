// The same contract checks run against the in-memory store and the SQLite store.

import CSQLite
import Foundation
import RelayProtocol
import RelayStore
import XCTest

final class StoreContractTests: XCTestCase {
    private var dirs: [URL] = []

    override func tearDown() {
        for d in dirs { try? FileManager.default.removeItem(at: d) }
    }

    private func tempDir() -> URL {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("store-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
        dirs.append(d)
        return d
    }

    /// Each store under test, with a way to reopen it (the SQLite one from disk).
    private func stores() throws -> [(name: String, store: RelayStore, reopen: () throws -> RelayStore)] {
        let memory = MemoryStore()
        let path = tempDir().appendingPathComponent("relay.db").path
        return [
            ("memory", memory, { memory }),
            ("sqlite", try SQLiteStore(path: path), { try SQLiteStore(path: path) }),
        ]
    }

    private func sampleQuestion(child: String = "c1") throws -> QuestionRecord {
        let q: JSONObject = [
            "id": .string(UUID().uuidString),
            "topic": .object([
                "kind": "communication", "personInformation": [.object(["handle": .object(["value": "+1 555", "kind": "phoneNumber"])])],
            ]),
            "expirationDate": "2030-01-01T00:00:00Z",
        ]
        let content = try QuestionContent.validate(q, now: Timestamp(milliseconds: 0))
        return QuestionRecord(
            content: content, child: child, family: "fam", status: .pending, attempt: 1, createdAt: Timestamp(milliseconds: 5))
    }

    func testEverythingSavedIsLoadedBack() throws {
        for (name, store, reopen) in try stores() {
            store.saveFamily("fam")
            let m = MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1, 2, 3], limitsEnabled: false)
            store.saveMember(m)
            var q = try sampleQuestion()
            store.saveQuestion(q)
            q.status = .answered
            q.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 9))
            store.saveQuestion(q)
            let h = NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555")!
            store.saveKnownHandle(
                KnownHandleRecord(child: "c1", handle: h, permanent: false, until: Timestamp(milliseconds: 99), actions: ["message"]))
            store.saveSession(SessionRecord(member: "c1", name: "tab", cursor: 3, topics: [.communication]))
            store.appendEvent(EventRecord(member: "c1", seq: 1, at: Timestamp(milliseconds: 1), topic: .communication, frame: [1]))
            XCTAssertTrue(store.hasChanges, name)
            try store.commit()
            XCTAssertFalse(store.hasChanges, name)

            let s = try reopen().load()
            XCTAssertEqual(s.families, ["fam"], name)
            XCTAssertEqual(s.members, [m], name)
            XCTAssertEqual(s.questions, [q], name)
            XCTAssertEqual(s.knownHandles.first?.until, Timestamp(milliseconds: 99), name)
            XCTAssertEqual(s.knownHandles.first?.actions, ["message"], name)
            XCTAssertEqual(s.sessions, [SessionRecord(member: "c1", name: "tab", cursor: 3, topics: [.communication])], name)
            XCTAssertEqual(s.heads["c1"], 1, name)
        }
    }

    func testEventsAfterACursorIncludingUncommittedOnes() throws {
        for (name, store, _) in try stores() {
            for seq in 1...5 {
                store.appendEvent(
                    EventRecord(member: "g1", seq: Int64(seq), at: Timestamp(milliseconds: Int64(seq)), topic: nil, frame: [UInt8(seq)]))
                if seq == 3 { try store.commit() }
            }
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 10).map(\.seq), [2, 3, 4, 5], name)
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 2).map(\.seq), [2, 3], name)
            XCTAssertEqual(try store.events(member: "g1", after: 3, limit: 1).map(\.frame), [[4]], name)
            XCTAssertEqual(try store.oldestEventSeq(member: "g1"), 1, name)
            XCTAssertEqual(try store.events(member: "nobody", after: 0, limit: 10), [], name)
        }
    }

    func testPruningKeepsHeadsSoSeqNeverRepeats() throws {
        for (name, store, reopen) in try stores() {
            for seq in 1...4 {
                store.appendEvent(
                    EventRecord(member: "g1", seq: Int64(seq), at: Timestamp(milliseconds: Int64(seq) * 1000), topic: nil, frame: [0]))
            }
            store.appendEvent(EventRecord(member: "g2", seq: 1, at: Timestamp(milliseconds: 9000), topic: nil, frame: [0]))
            try store.commit()
            let dropped = try store.pruneEvents(olderThan: Timestamp(milliseconds: 2500), acknowledged: ["g2": 1])
            XCTAssertEqual(dropped, 3, name)
            XCTAssertEqual(try store.oldestEventSeq(member: "g1"), 3, name)
            XCTAssertNil(try store.oldestEventSeq(member: "g2"), name)
            let s = try reopen().load()
            XCTAssertEqual(s.heads["g2"], 1, "\(name): the head outlives its events")
            XCTAssertEqual(s.heads["g1"], 4, name)
        }
    }

    func testOneDurableSessionIsForgottenAndTheOthersKept() throws {
        // Forgotten while its row is still in the journal, and again once it is in the tables.
        for written in [false, true] {
            for (name, store, reopen) in try stores() {
                let kept = [
                    SessionRecord(member: "c1", name: "pad", cursor: 2, topics: []),
                    SessionRecord(member: "c2", name: "phone", cursor: 1, topics: []),
                ]
                for s in kept + [SessionRecord(member: "c1", name: "phone", cursor: 5, topics: [.communication])] {
                    store.saveSession(s)
                }
                try store.commit()
                if written { try store.checkpoint() }
                store.deleteSession(member: "c1", name: "phone")
                try store.commit()
                if written { try store.checkpoint() }
                let loaded = try reopen().load().sessions.sorted { ($0.member, $0.name) < ($1.member, $1.name) }
                XCTAssertEqual(loaded, kept, "\(name), written into the tables: \(written)")
            }
        }
    }

    func testASessionForgottenAndStartedAgainDoesNotInheritTheOldOnesAcks() throws {
        let store = try SQLiteStore(path: tempDir().appendingPathComponent("relay.db").path)
        store.saveSession(SessionRecord(member: "c1", name: "phone", cursor: 0, topics: []))
        try store.commit()
        store.noteCursor(member: "c1", session: "phone", cursor: 100)  // the old session's acks
        store.deleteSession(member: "c1", name: "phone")
        store.saveSession(SessionRecord(member: "c1", name: "phone", cursor: 0, topics: []))
        for seq in 1...10 {
            store.appendEvent(EventRecord(member: "c1", seq: Int64(seq), at: Timestamp(milliseconds: 1), topic: nil, frame: [0]))
        }
        try store.commit()
        try store.checkpoint()  // the table writer leaves out events every session acknowledged
        XCTAssertEqual(try store.events(member: "c1", after: 0, limit: 100).map(\.seq), Array(1...10))
    }

    func testSQLiteRecordsMigrationsAndRefusesANewerSchema() throws {
        let path = tempDir().appendingPathComponent("relay.db").path
        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try store.schemaVersion(), 3)
        _ = try SQLiteStore(path: path)  // reopening migrates nothing
        var db: OpaquePointer?
        XCTAssertEqual(sqlite3_open(path, &db), 0)
        XCTAssertEqual(sqlite3_exec(db, "INSERT INTO migrations VALUES(99, 'future', 0)", nil, nil, nil), 0)
        sqlite3_close(db)
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertTrue("\(error)".contains("newer"), "\(error)")
        }
    }

    func testFullDatabaseFailsTheCommitAndKeepsWhatWasCommitted() throws {
        let path = tempDir().appendingPathComponent("relay.db").path
        let store = try SQLiteStore(path: path)
        store.saveFamily("kept")
        try store.commit()
        // Cap the database at its current size: the next large commit cannot fit.
        let capped = try SQLiteStore(path: path, maxPageCount: pageCount(ofDatabaseAt: path))
        for i in 0..<200 {
            capped.appendEvent(
                EventRecord(
                    member: "g", seq: Int64(i + 1), at: Timestamp(milliseconds: 0), topic: nil, frame: Array(repeating: 7, count: 4000)))
        }
        XCTAssertThrowsError(try capped.commit()) { error in
            XCTAssertTrue((error as? SQLiteError)?.isFull == true, "\(error)")
        }
        capped.discardChanges()
        let s = try SQLiteStore(path: path).load()
        XCTAssertEqual(s.families, ["kept"])
        XCTAssertNil(s.heads["g"], "nothing of the failed commit is stored")
    }
}
