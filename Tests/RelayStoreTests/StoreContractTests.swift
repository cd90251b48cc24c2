// The store contract, checked against the in-memory store and the SQLite store alike:
// what is committed loads back (also from a reopened SQLite store) exactly as
// `StoreSnapshot.apply` folds it, all or nothing, and pruning drops only the oldest of
// each stream, keeping heads.

import Foundation
import RelayModel
import RelayProtocol
@testable import RelayStore
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
        let other = tempDir().appendingPathComponent("relay.db").path
        func indexingAtOnce(_ path: String) throws -> SQLiteStore {
            let store = try SQLiteStore(path: path, questionIndexSeconds: 0)
            store.eventIndexRoundRows = 1
            return store
        }
        return [
            ("memory", memory, { memory }),
            // Questions added to its lookup tables at the first chance (a relay waits 10 s).
            ("sqlite", try SQLiteStore(path: path, questionIndexSeconds: 0), { try SQLiteStore(path: path, questionIndexSeconds: 0) }),
            // Rows that stay added to the events index by the next step (a relay waits for 32,768).
            ("sqlite, indexing at once", try indexingAtOnce(other), { try indexingAtOnce(other) }),
        ]
    }

    static func question(child: String = "c1", row: Int64, avatar: Int = 0) throws -> QuestionRecord {
        var person: JSONObject = ["handle": .object(["value": .string("+1 555 \(row)"), "kind": "phoneNumber"])]
        if avatar > 0 { person["avatarImage"] = .string(Data(repeating: 7, count: avatar).base64EncodedString()) }
        let q: JSONObject = [
            "id": .string(UUID().uuidString),
            "topic": .object(["kind": "communication", "personInformation": [.object(person)]]),
            "expirationDate": "2030-01-01T00:00:00Z",
        ]
        let content = try QuestionContent.validate(q, now: Timestamp(milliseconds: 0))
        return QuestionRecord(
            content: content, child: child, family: "fam", status: .pending, attempt: 1, createdAt: Timestamp(milliseconds: row),
            row: row)
    }

    /// A position after every event of these tests: everything is settled.
    static let later = Int64.max

    static func event(_ member: String, _ seq: Int64, at: Int64 = 1, topic: TopicKind? = nil) -> EventRecord {
        EventRecord(member: member, seq: seq, at: Timestamp(milliseconds: at), topic: topic, frame: frame(seq))
    }

    /// An event's frame, as sent: a 4-byte length, then its JSON.
    static func frame(_ seq: Int64, padding: Int = 0) -> [UInt8] {
        (["type": "question", "seq": .int(seq), "pad": .string(String(repeating: "x", count: padding))] as JSONObject).frame
    }

    /// Turns of every kind of change.
    static func turns() throws -> [[Change]] {
        var answered = try question(row: 1), cancelled = try question(row: 2)
        let pending = try question(row: 3)
        let h = NormalizedHandle(kind: .phoneNumber, rawValue: "+1 555 1")!
        let timed = NormalizedHandle(kind: .emailAddress, rawValue: "Kim@Example.com")!
        var child = MemberRecord(id: "c1", family: "fam", role: .child, tokenHash: [1, 2])
        let timedRecord = KnownHandleRecord(
            row: 1, child: "c1", handle: timed, permanent: false, until: Timestamp(milliseconds: 99), actions: [])
        let first: [Change] = [
            .family("fam"), .member(child), .member(MemberRecord(id: "g1", family: "fam", role: .guardian, tokenHash: [3])),
            .question(answered), .question(cancelled), .question(pending), .event(event("g1", 1)), .event(event("g1", 2)),
            .session(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: [])),
            .session(SessionRecord(member: "g1", name: "old", cursor: 0, topics: [])),
            .session(SessionRecord(member: "c1", name: "pad", cursor: 0, topics: [.communication])),
            .knownHandle(timedRecord),
        ]
        answered.status = .answered
        answered.outcome = Outcome(choice: .approve, guardian: "g1", answeredAt: Timestamp(milliseconds: 7))
        cancelled.status = .cancelled
        child.limitsEnabled = false
        let second: [Change] = [
            .questionState(answered), .questionState(cancelled), .member(child),
            .knownHandle(
                KnownHandleRecord(row: 2, child: "c1", handle: h, permanent: true, until: nil, actions: ["message", "audioCall"])),
            // A custom handle is compared exactly, a NUL within it too.
            .knownHandle(
                KnownHandleRecord(
                    row: 3, child: "c1", handle: NormalizedHandle(kind: .custom, rawValue: "bob\u{0}evil")!, permanent: true,
                    until: nil, actions: [])),
            .unknownHandle(timedRecord), .event(event("c1", 1, at: 7, topic: .communication)),
            .session(SessionRecord(member: "g1", name: "tab", cursor: 2, topics: [])), .dropSession(member: "g1", name: "old"),
            .dropSessions(member: "c1"),
        ]
        return [first, second]
    }

    func testWhatIsCommittedLoadsBackAsTheChangesFoldIn() throws {
        for (name, store, reopen) in try stores() {
            var expected = StoreSnapshot()
            for turn in try Self.turns() {
                try store.commit(turn)
                turn.forEach { expected.apply($0) }
                let loaded = try reopen().load()
                XCTAssertEqual(loaded.normalized, expected.normalized, name)
                XCTAssertEqual(loaded.questions.map(\.row), expected.questions.map(\.row), name)
            }
            let s = try reopen().load()
            XCTAssertEqual(s.questions.map(\.row), [3], "\(name): only what is live loads")
            let stored = try reopen()
            let answered = try XCTUnwrap(stored.questions(of: "c1", status: .answered, newestFirst: true, after: nil, limit: 9).first)
            XCTAssertEqual(answered.outcome?.guardian, "g1", name)
            XCTAssertEqual(try stored.question(answered.key), answered, name)
            XCTAssertEqual(try stored.question(answered.key)?.row, 1, name)
            XCTAssertEqual(s.heads, ["g1": 2, "c1": 1], name)
            XCTAssertEqual(s.firstRetained, ["g1": 1, "c1": 1], name)
            XCTAssertEqual(s.lastEventAt, Timestamp(milliseconds: 7), name)
            XCTAssertEqual(s.lastQuestionRow, 3, name)
            XCTAssertEqual(try store.events(member: "c1", after: 0, limit: 10).first?.topic, .communication, name)
        }
    }

    /// Questions of `child`, one per row, asked at `at(row)`, finished unless `pending` says not.
    private static func asked(
        _ rows: ClosedRange<Int64>, child: String = "c1", at: (Int64) -> Int64 = { $0 }, avatar: Int = 0,
        pending: (Int64) -> Bool = { _ in false }
    ) throws -> [QuestionRecord] {
        try rows.map { row in
            var q = try question(child: child, row: row, avatar: avatar)
            q.createdAt = Timestamp(milliseconds: at(row))
            if !pending(row) { q.status = row % 2 == 0 ? .cancelled : .expired }
            return q
        }
    }

    func testStoredQuestionsReadByIdAndInListOrderFromAPlace() throws {
        for (name, store, _) in try stores() {
            // Rows 1–6 asked in three milliseconds (ties go by row); another child's between them.
            let mine = try Self.asked(1...6, at: { ($0 + 1) / 2 }, pending: { $0 == 5 })
            let theirs = try Self.asked(7...8, child: "c2")
            try store.commit((mine + theirs).map { .question($0) })
            func rows(_ status: QuestionStatus? = nil, newestFirst: Bool, after: QuestionPlace? = nil, limit: Int = 99) throws
                -> [Int64]
            {
                try store.questions(of: "c1", status: status, newestFirst: newestFirst, after: after, limit: limit).map(\.row)
            }
            XCTAssertEqual(try rows(newestFirst: true), [6, 5, 4, 3, 2, 1], name)
            XCTAssertEqual(try rows(newestFirst: false), [1, 2, 3, 4, 5, 6], name)
            XCTAssertEqual(try rows(newestFirst: true, after: QuestionPlace(mine[3]), limit: 2), [3, 2], name)
            XCTAssertEqual(try rows(newestFirst: false, after: QuestionPlace(mine[2])), [4, 5, 6], name)
            XCTAssertEqual(try rows(.cancelled, newestFirst: true), [6, 4, 2], name)
            XCTAssertEqual(try rows(.pending, newestFirst: false), [5], name)
            XCTAssertEqual(try store.question(theirs[1].key), theirs[1], name)
            XCTAssertEqual(try store.question(theirs[1].key)?.row, 8, name)
            XCTAssertNil(try store.question(try Self.question(row: 99).key), name)
        }
    }

    func testEachChildKeepsItsNewestQuestionsWithinTheLimitsPendingOnesAlways() throws {
        for (name, store, reopen) in try stores() {
            // c1: 10 questions, the oldest two pending; c2: 3, within any limit here.
            try store.commit(try Self.asked(1...10, pending: { $0 <= 2 }).map { .question($0) })
            try store.commit(try Self.asked(11...13, child: "c2").map { .question($0) })
            // Bounded steps (3 questions a call), until it says no more are due.
            func maintain(_ kept: QuestionsKept) throws {
                var calls = 0
                while try store.maintainQuestions(keeping: kept, limit: 3) {
                    calls += 1
                    XCTAssertLessThan(calls, 40, "\(name): it must end")
                }
            }
            try maintain(QuestionsKept(count: 5))
            XCTAssertEqual(
                try store.questions(of: "c1", status: nil, newestFirst: false, after: nil, limit: 99).map(\.row), [1, 2, 8, 9, 10], name)
            XCTAssertEqual(try store.questions(of: "c2", status: nil, newestFirst: false, after: nil, limit: 99).count, 3, name)
            XCTAssertNil(try store.question(try XCTUnwrap(Self.asked(3...3).first).key), name)
            // By size: questions with 3 KB avatars, at most 10 KB of them kept.
            try store.commit(try Self.asked(14...17, child: "c3", avatar: 3000).map { .question($0) })
            try maintain(QuestionsKept(count: 100, bytes: 10_000))
            XCTAssertEqual(
                try store.questions(of: "c3", status: nil, newestFirst: false, after: nil, limit: 99).map(\.row), [16, 17], name)
            // A re-asked question in place of a forgotten one counts again (and its row stays given).
            try store.commit([.question(try Self.question(child: "c2", row: 13))])
            XCTAssertEqual(try reopen().load().lastQuestionRow, 17, name)
        }
    }

    func testEventsAfterASeqInOrderUpToALimit() throws {
        for (name, store, _) in try stores() {
            try store.commit((1...3).map { .event(Self.event("g1", $0)) })
            try store.commit([.event(Self.event("g1", 4, topic: .communication)), .event(Self.event("g1", 5))])
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 10).map(\.seq), [2, 3, 4, 5], name)
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 2).map(\.seq), [2, 3], name)
            XCTAssertEqual(try store.events(member: "g1", after: 3, limit: 1).map(\.frame), [Self.frame(4)], name)
            XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.topic), [nil, nil, nil, .communication, nil], name)
            XCTAssertEqual(try store.events(member: "nobody", after: 0, limit: 10), [], name)
            // Up to a size: the event that reaches it is the last (one at least).
            let size = Self.frame(2).count
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 10, maxBytes: 2 * size).map(\.seq), [2, 3], name)
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 10, maxBytes: 2 * size + 1).map(\.seq), [2, 3, 4], name)
            XCTAssertEqual(try store.events(member: "g1", after: 1, limit: 10, maxBytes: 1).map(\.seq), [2], name)
        }
    }

    func testPruningDropsTheOldestOfEachStreamInStepsAndKeepsHeads() throws {
        for (name, store, reopen) in try stores() {
            let guardians: [Change] = ["g1", "g2"].map { .member(MemberRecord(id: $0, family: "fam", role: .guardian, tokenHash: [0])) }
            // A commit each, as the relay appends them in turns apart: the SQLite store drops
            // a commit's events of a member together.
            try store.commit(guardians + [.session(SessionRecord(member: "g2", name: "tab", cursor: 1, topics: []))])
            for seq in Int64(1)...6 { try store.commit([.event(Self.event("g1", seq, at: seq * 1000))]) }
            try store.commit([.event(Self.event("g2", 1, at: 9000))])
            // By age (g1's first two) and by acknowledgement (all of g2's), two events a step.
            var dropped: [String: Int64] = [:]
            var steps = 0
            while true {
                let step = try store.prune(
                    olderThan: Timestamp(milliseconds: 2500), acknowledged: ["g2": 1], settledThrough: Self.later, limit: 2)
                dropped.merge(step.through) { max($0, $1) }
                if !step.more { break }
                steps += 1
                XCTAssertLessThan(steps, 10, "\(name): pruning must end")
            }
            XCTAssertEqual(dropped, ["g1": 2, "g2": 1], name)
            XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [3, 4, 5, 6], name)
            XCTAssertEqual(try store.events(member: "g2", after: 0, limit: 10), [], name)
            // Only as far as the stored cursors say: one whose commit may yet fail lets nothing go.
            try store.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 3, topics: []))])
            XCTAssertEqual(
                try store.prune(olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 5], settledThrough: Self.later, limit: 100)
                    .through, ["g1": 3], name)
            // Acknowledged past a later event of the stream, the ones before it go too: never a hole.
            try store.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 5, topics: []))])
            XCTAssertEqual(
                try store.prune(olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 5], settledThrough: Self.later, limit: 100)
                    .through, ["g1": 5], name)
            XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), [6], name)
            let s = try reopen().load()
            XCTAssertEqual(s.heads["g2"], 1, "\(name): the head outlives its events")
            XCTAssertEqual(s.heads["g1"], 6, name)
            XCTAssertEqual(s.firstRetained["g1"], 6, name)
            XCTAssertNil(s.firstRetained["g2"], name)
        }
    }

    /// Many old rows that must stay (a session that never acknowledges) do not keep the
    /// acknowledged rows of other members behind them.
    func testRowsThatStayDoNotHoldBackTheRowsBehindThem() throws {
        for (name, store, _) in try stores() {
            let guardians: [Change] = ["g1", "g2"].map { .member(MemberRecord(id: $0, family: "fam", role: .guardian, tokenHash: [0])) }
            try store.commit(
                guardians + ["g1", "g2"].map { .session(SessionRecord(member: $0, name: "tab", cursor: 0, topics: [])) })
            for seq in Int64(1)...60 { try store.commit([.event(Self.event("g1", seq, at: 100_000 + seq))]) }
            for seq in Int64(1)...3 { try store.commit([.event(Self.event("g2", seq, at: 200_000 + seq))]) }
            try store.commit([.session(SessionRecord(member: "g2", name: "tab", cursor: 3, topics: []))])
            // g1 acknowledged nothing, and its events are young: all 60 stay; g2's go, in
            // steps of two rows that pass over g1's (and, indexing at once, as many more that
            // add g1's to the index).
            var dropped: [String: Int64] = [:]
            var steps = 0
            while true {
                let step = try store.prune(
                    olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0, "g2": 3], settledThrough: Self.later, limit: 2)
                dropped.merge(step.through) { max($0, $1) }
                steps += 1
                XCTAssertLessThan(steps, 70, "\(name): pruning must end")
                if !step.more { break }
            }
            XCTAssertEqual(dropped, ["g2": 3], "\(name): g2's rows, found behind g1's sixty")
            XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 100).count, 60, name)
        }
    }

    /// Events read the same whether a pruning step left their rows where they were, or
    /// kept them (for a session that has not acknowledged them) and wrote newer ones
    /// after, and whether the store was reopened in between; events appended after the
    /// step's `settledThrough` are left to a later one.
    func testEventsReadTheSameWhateverPruningDidWithTheirRows() throws {
        for (name, store, reopen) in try stores() {
            try store.commit([
                .member(MemberRecord(id: "g1", family: "fam", role: .guardian, tokenHash: [0])),
                .session(SessionRecord(member: "g1", name: "tab", cursor: 0, topics: [])),
            ])
            for seq in Int64(1)...2 { try store.commit([.event(Self.event("g1", seq, at: seq * 1000))]) }
            let settled = store.eventPosition
            for seq in Int64(3)...4 { try store.commit([.event(Self.event("g1", seq, at: seq * 1000))]) }
            // Nothing acknowledged: the settled rows are kept.
            var step = PruneStep(more: true)
            for _ in 0..<3 where step.more {  // indexing at once, a second step adds them to the index
                step = try store.prune(olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 0], settledThrough: settled, limit: 10)
                XCTAssertEqual(step.through, [:], name)
            }
            XCTAssertFalse(step.more, name)
            for seq in Int64(5)...6 { try store.commit([.event(Self.event("g1", seq, at: seq * 1000))]) }
            XCTAssertEqual(try store.events(member: "g1", after: 0, limit: 10).map(\.seq), Array(1...6), name)
            XCTAssertEqual(try store.events(member: "g1", after: 3, limit: 2).map(\.seq), [4, 5], name)
            let reopened = try reopen()
            XCTAssertEqual(try reopened.events(member: "g1", after: 1, limit: 10).map(\.seq), Array(2...6), "\(name), reopened")
            // Acknowledged up to 5, stored too: the kept rows go, then the newer ones, never past 5.
            try reopened.commit([.session(SessionRecord(member: "g1", name: "tab", cursor: 5, topics: []))])
            step = try reopened.prune(olderThan: Timestamp(milliseconds: 0), acknowledged: ["g1": 5], settledThrough: Self.later, limit: 10)
            XCTAssertEqual(step.through, ["g1": 5], name)
            XCTAssertEqual(try reopened.events(member: "g1", after: 0, limit: 10).map(\.seq), [6], name)
            try reopened.commit([.event(Self.event("g1", 7, at: 7000))])
            XCTAssertEqual(try reopen().load().firstRetained["g1"], 6, name)
            XCTAssertEqual(try reopen().events(member: "g1", after: 5, limit: 10).map(\.seq), [6, 7], name)
        }
    }
}
