// The filter that spares a lookup on disk for a new question id: never "not stored" for
// an id that is, rarely "may be" for one that is not, across growth, and over a store
// reopened while its ids are read back in the background.

import Foundation
import RelayModel
import RelayProtocol
import Synchronization
import XCTest

@testable import RelayStore

final class StoredQuestionIDsTests: XCTestCase {
    private func randomID() -> QuestionID { QuestionID(high: .random(in: .min ... .max), low: .random(in: .min ... .max)) }

    func testEveryInsertedIdIsHeldAndFewOthersSeemSoAcrossGrowth() {
        var ids = StoredQuestionIDs(expected: 1000)
        ids.markComplete()
        let inserted = (0..<200_000).map { _ in randomID() }
        for id in inserted { ids.insert(id) }  // 200 times what it was sized for
        XCTAssertTrue(inserted.allSatisfy(ids.mayHold), "an inserted id taken for one never stored")
        let strangers = (0..<100_000).map { _ in randomID() }.filter { ids.mayHold($0) }.count
        XCTAssertLessThan(strangers, 5_000, "more than 5% of new ids would still be looked up")
        // Ids in a run (not random, as a client may choose them) spread as well.
        var sequential = StoredQuestionIDs(expected: 100_000)
        sequential.markComplete()
        for n in 0..<100_000 { sequential.insert(QuestionID(high: 0, low: UInt64(n))) }
        XCTAssertTrue((0..<100_000).allSatisfy { sequential.mayHold(QuestionID(high: 0, low: UInt64($0))) })
        XCTAssertLessThan((100_000..<200_000).filter { sequential.mayHold(QuestionID(high: 0, low: UInt64($0))) }.count, 5_000)
    }

    func testUntilTheStoredIdsAreReadEveryIdMayBeHeld() {
        var ids = StoredQuestionIDs(expected: 10)
        XCTAssertTrue(ids.mayHold(randomID()))
        ids.markComplete()
        XCTAssertFalse(ids.mayHold(randomID()))
    }

    /// A store whose every question is listed in memory (a new one, say) has nothing to
    /// read back: its filter is whole as it opens, with no thread or connection for it.
    func testAStoreWithEveryQuestionListedReadsNothingBack() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var store: SQLiteStore? = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        XCTAssertTrue(store!.storedIDs.isSettled, "a new store")
        let listed = try (1...10).map { try StoreContractTests.question(row: Int64($0)) }
        try store!.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        try store!.commit(listed.map { .question($0) })
        store = nil

        let reopened = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        XCTAssertTrue(reopened.storedIDs.isSettled, "its questions all listed")
        XCTAssertTrue(listed.allSatisfy { reopened.storedIDs.mayHold($0.key) })
        XCTAssertLessThan((0..<1_000).filter { _ in reopened.storedIDs.mayHold(randomID()) }.count, 100, "new ids known new")
    }

    /// Questions stored before the store is opened, some in the lookup tables and some
    /// listed above their mark, are found once read back; new ids are known new; and a
    /// question stored while the ids are read back is found too.
    func testAReopenedStoreFindsEveryStoredQuestionAndKnowsNewIdsWithoutALookup() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        var store: SQLiteStore? = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        try store!.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        let indexed = try (1...70_000).map { try StoreContractTests.question(row: Int64($0)) }  // more than one step of the scan
        try store!.commit(indexed.map { .question($0) })
        try store!.indexQuestions()
        let listed = try (70_001...70_010).map { try StoreContractTests.question(row: Int64($0)) }
        try store!.commit(listed.map { .question($0) })
        store = nil

        let reopened = try SQLiteStore(path: path, questionIndexSeconds: 3600)
        let late = try StoreContractTests.question(row: 70_011)
        try reopened.commit([.question(late)])
        let deadline = Date().addingTimeInterval(30)
        while !reopened.storedIDs.isSettled {
            guard Date() < deadline else { return XCTFail("the stored ids were not read back within 30 s") }
            usleep(1000)
        }
        for q in [indexed[0], indexed[65_535], indexed[65_536], indexed[69_999], listed[0], listed[9], late] {
            XCTAssertEqual(try reopened.question(q.key)?.row, q.row)
        }
        XCTAssertTrue(
            (indexed + listed + [late]).allSatisfy { reopened.storedIDs.mayHold($0.key) },
            "a stored id taken for a new one")
        let new = (0..<10_000).map { _ in randomID() }
        XCTAssertLessThan(new.filter { reopened.storedIDs.mayHold($0) }.count, 500)
        XCTAssertNil(try reopened.question(new[0]))
    }

    /// Ids forgotten stay in a filter: once it holds many more than were stored when it
    /// was built, it is built again from what is stored, and finds every stored question
    /// all the while.
    func testTheFilterIsBuiltAgainFromWhatIsStored() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
        store.storedIDs.rebuildMinimum.store(1000, ordering: .relaxed)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        func settle() {
            let deadline = Date().addingTimeInterval(30)
            while !store.storedIDs.isSettled && Date() < deadline { usleep(1000) }
        }
        settle()
        var asked: [QuestionRecord] = []
        for round in 0..<4 {
            let batch = try (1...700).map { try StoreContractTests.question(row: Int64(round * 700 + $0)) }
            try store.commit(batch.map { .question($0) })
            try store.indexQuestions()
            asked += batch
            // Every stored question found, during a build as after it.
            XCTAssertTrue(asked.allSatisfy { store.storedIDs.mayHold($0.key) }, "round \(round)")
            settle()
            XCTAssertTrue(asked.allSatisfy { store.storedIDs.mayHold($0.key) }, "round \(round), settled")
        }
        XCTAssertTrue(store.storedIDs.isSettled)
        XCTAssertGreaterThanOrEqual(store.storedIDs.builds, 2, "built at start, and again as ids came")
        XCTAssertNil(try store.question(randomID()))
    }

    /// Past its budget the filter is off (every id looked up, nothing held in it), and on
    /// again once what is stored fits.
    func testPastItsBudgetTheFilterIsOffUntilWhatIsStoredFits() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
        store.storedIDs.budget.store(1000, ordering: .relaxed)
        store.storedIDs.rebuildMinimum.store(500, ordering: .relaxed)
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        let deadline = Date().addingTimeInterval(30)
        while !store.storedIDs.isSettled && Date() < deadline { usleep(1000) }
        var asked = try (1...1200).map { row -> QuestionRecord in
            var q = try StoreContractTests.question(row: Int64(row))
            q.status = .cancelled
            return q
        }
        try store.commit(asked.map { .question($0) })
        try store.indexQuestions()
        XCTAssertFalse(store.storedIDs.isSettled, "past the budget: off")
        XCTAssertTrue(store.storedIDs.mayHold(randomID()), "off, every id is looked up")
        XCTAssertEqual(try store.question(asked[0].key)?.row, 1)
        // Forgotten down to what fits, it is built again at the next build due.
        while try store.maintainQuestions(keeping: QuestionsKept(count: 100), limit: 10_000) {}
        let more = try (1201...1800).map { try StoreContractTests.question(row: Int64($0)) }
        try store.commit(more.map { .question($0) })
        asked = Array(asked.suffix(100)) + more
        while !store.storedIDs.isSettled && Date() < deadline { usleep(1000) }
        XCTAssertTrue(store.storedIDs.isSettled, "on again")
        XCTAssertTrue(asked.allSatisfy { store.storedIDs.mayHold($0.key) })
    }

    /// A rebuild due when the count of stored questions cannot be read is put off: taken
    /// for 0, it would read nothing back and take every stored id not listed for a new one.
    func testARebuildWithoutTheStoredCountKeepsTheFilter() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
        store.storedIDs.rebuildMinimum.store(100, ordering: .relaxed)
        func settle() {
            let deadline = Date().addingTimeInterval(30)
            while !store.storedIDs.isSettled && Date() < deadline { usleep(1000) }
        }
        try store.commit([.family("fam"), .member(MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1]))])
        let indexed = try (1...300).map { try StoreContractTests.question(row: Int64($0)) }
        try store.commit(indexed.map { .question($0) })
        try store.indexQuestions()
        settle()
        // Tallies whose sum overflows: `sum(count)` fails, every commit still succeeds.
        let other = try SQLiteDatabase(path: path)
        try other.exec("PRAGMA busy_timeout = 5000")
        try other.exec("INSERT INTO questionTally(child, count, bytes) VALUES('x1', 9223372036854775807, 0), ('x2', 1, 0)")
        XCTAssertThrowsError(try store.storedQuestionCount())
        let buildsBefore = store.storedIDs.builds
        let listed = try (301...1000).map { try StoreContractTests.question(row: Int64($0)) }  // past twice what was read
        try store.commit(listed.map { .question($0) })
        settle()
        XCTAssertEqual(store.storedIDs.builds, buildsBefore, "no build without the count")
        for q in [indexed[0], indexed[299], listed[0]] {
            XCTAssertEqual(try store.question(q.key)?.row, q.row)
        }
    }

    /// A build ended by the filter going past its budget may still be reading when the next
    /// begins: it neither fills nor ends the next one.
    func testABuildEndedWhileReadingLeavesTheNextAlone() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("ids-\(UUID().uuidString).db").path
        defer { for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) } }
        let db = try SQLiteDatabase(path: path)
        try db.exec(
            "CREATE TABLE questionIDs(high INTEGER NOT NULL, low INTEGER NOT NULL, key INTEGER NOT NULL, PRIMARY KEY(high, low)) WITHOUT ROWID"
        )
        var stored: [QuestionID] = []
        func store(_ count: Int) throws {
            for _ in 0..<count {
                let id = randomID()
                stored.append(id)
                try db.run(
                    "INSERT INTO questionIDs(high, low, key) VALUES(?, ?, ?)",
                    [.int(Int64(bitPattern: id.high)), .int(Int64(bitPattern: id.low)), .int(Int64(stored.count))])
            }
        }
        try store(5)
        let scan = StoredIDsScan(path: path)
        scan.budget.store(1000, ordering: .relaxed)
        scan.rebuildMinimum.store(10, ordering: .relaxed)
        // Each build's read waits, once it has read, until let go: the first, then the second.
        let (reading, ended) = (DispatchSemaphore(value: 0), DispatchSemaphore(value: 0))
        let letGo = [DispatchSemaphore(value: 0), DispatchSemaphore(value: 0)]
        let reads = Mutex(0)
        scan.buildThreadStep.withLock {
            $0 = { hasEnded in
                if hasEnded {
                    ended.signal()
                    return
                }
                let n = reads.withLock { n in
                    defer { n += 1 }
                    return n
                }
                reading.signal()
                letGo[n].wait()
            }
        }
        scan.build(expected: 5, listed: [])
        reading.wait()
        _ = scan.insert((0..<1001).map { _ in randomID() })  // past the budget: off, the build ended
        XCTAssertTrue(scan.insert((0..<11).map { _ in randomID() }), "off, a build is due")
        try store(5)
        scan.build(expected: 10, listed: [])
        reading.wait()
        letGo[0].signal()  // the first read ends
        ended.wait()
        XCTAssertTrue(stored.allSatisfy(scan.mayHold), "a stored id taken for a new one while the second build reads")
        letGo[1].signal()
        ended.wait()
        XCTAssertTrue(scan.isSettled)
        XCTAssertEqual(scan.builds, 1, "the second build, not the first")
        XCTAssertTrue(stored.allSatisfy(scan.mayHold))
    }
}
