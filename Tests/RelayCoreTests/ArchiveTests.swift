// The core holds what is live: pending questions, and finished ones only until what
// finished them is committed. Everything else is read back from the store, here the
// in-memory one (the harness commits every turn, so nothing finished stays held).

import Foundation
@testable import RelayCore
import RelayModel
import RelayProtocol
import RelayStore
import Synchronization
import XCTest

final class ArchiveTests: XCTestCase {
    /// 30 questions of c1: 20 answered (the first 20), 5 cancelled, 5 pending.
    private func family(_ h: CoreHarness) -> (c: ConnectionID, g: ConnectionID, asked: [JSONObject]) {
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        var asked: [JSONObject] = []
        for i in 0..<30 {
            let q = h.question()
            asked.append(q)
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.advance(seconds: 1)
            if i < 20 { h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"]) }
            if i >= 20 && i < 25 { h.ok(c, ["type": "cancel", "questionId": q["id"]!]) }
        }
        return (c, g, asked)
    }

    func testOnlyPendingQuestionsStayHeldAndFinishedOnesAreReadBackForEveryRequest() throws {
        let h = try CoreHarness()
        let (c, g, asked) = family(h)
        XCTAssertEqual(h.core.questions.count, 5, "the pending ones only")
        let ids = asked.map { $0["id"]!.string!.uppercased() }

        // A resend of an answered id: its answer, as the first time.
        let resent = h.ok(c, ["type": "ask", "question": .object(asked[3])])
        XCTAssertEqual(resent["status"]?.string, "answered")
        XCTAssertEqual(resent["response"]?["choice"]?["id"]?.string, "approve")
        // Answering or cancelling a finished one: what it became, with who answered.
        XCTAssertEqual(
            h.error(g, ["type": "answer", "questionId": asked[3]["id"]!, "choice": "decline"], .alreadyAnswered)["answeredBy"]?.string, "g1"
        )
        _ = h.error(c, ["type": "cancel", "questionId": asked[4]["id"]!], .alreadyAnswered)
        _ = h.error(g, ["type": "answer", "questionId": asked[21]["id"]!, "choice": "approve"], .cancelled)
        XCTAssertEqual(h.ok(c, ["type": "cancel", "questionId": asked[21]["id"]!])["status"]?.string, "cancelled")
        // Another family's stored question is not found; another child's id is refused.
        let (og, _) = h.login("og1")
        _ = h.error(og, ["type": "answer", "questionId": asked[3]["id"]!, "choice": "approve"], .notFound)
        let (c2, _) = h.login("c2")
        _ = h.error(c2, ["type": "ask", "question": .object(asked[3])], .invalidQuestion)
        // A cancelled one asked again: held again, as attempt 2, under its first time.
        let cancelled = h.ok(c, ["type": "questions", "status": "cancelled"])["questions"]!.array!
        let firstAsked = try XCTUnwrap(cancelled.first { $0["id"]?.string == ids[22] }?["createdAt"])
        _ = h.drain(g)
        let reasked = h.ok(c, ["type": "ask", "question": .object(asked[22])])
        XCTAssertEqual(reasked["attempt"]?.int, 2)
        XCTAssertEqual(h.core.questions.count, 6)
        XCTAssertEqual(h.events(g, "question").last?["question"]?["createdAt"], firstAsked)

        // Lists: the child's, filtered; the guardians' history, newest first, in pages.
        let answered = h.ok(c, ["type": "questions", "status": "answered"])["questions"]!.array!
        XCTAssertEqual(answered.map { $0["id"]!.string! }, ids[0..<20].reversed())
        let history = h.ok(g, ["type": "history", "limit": 12])
        XCTAssertEqual(history["questions"]!.array!.map { $0["id"]!.string! }, Array(ids.reversed().prefix(12)))
        var all: [String] = []
        var after: JSON?
        repeat {
            var request: JSONObject = ["type": "history", "child": "c1", "limit": 7]
            request["after"] = after
            let page = h.ok(g, request)
            all += page["questions"]!.array!.map { $0["id"]!.string! }
            after = page["next"]
            XCTAssertEqual(page["more"]?.bool ?? false, after != nil)
        } while after != nil && all.count < 100
        XCTAssertEqual(all, ids.reversed(), "every question once, in order, across pages of 7")
        XCTAssertEqual(h.ok(g, ["type": "pending", "child": "c1"])["questions"]!.array!.count, 6)
    }

    /// Until its commit, a finished question is held: the store still has it pending, and
    /// a request in between must see it finished.
    func testAFinishedQuestionStaysHeldUntilTheTakeThatStoresItIsCommitted() throws {
        let h = try CoreHarness()
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.core.receive(
            g, body: (["type": "answer", "id": "a", "questionId": q["id"]!, "choice": "approve"] as JSONObject).encoded, now: h.now)
        let answering = h.core.takeChanges()
        h.core.committed(throughTake: h.core.takes - 1)
        XCTAssertEqual(h.core.questions.count, 1, "held while its take is not committed")
        h.core.receive(c, body: (["type": "ask", "id": "again", "question": .object(q)] as JSONObject).encoded, now: h.now)
        try h.store.commit(answering)
        h.pump()
        XCTAssertEqual(h.drain(c).first { $0["re"]?.string == "again" }?["status"]?.string, "answered")
        XCTAssertEqual(h.core.questions.count, 0, "gone once committed")
        XCTAssertEqual(h.ok(c, ["type": "ask", "question": .object(q)])["status"]?.string, "answered", "and read back")
    }

    /// A list's next page comes after the place where the last one ended, also once the
    /// question there was forgotten: nothing asked in the same millisecond is skipped.
    func testAPageAfterAForgottenQuestionSkipsNothing() throws {
        let h = try CoreHarness(kept: QuestionsKept(count: 1)) { $0.listReplyBytes = 1 }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let x = h.question(), y = h.question()
        h.ok(c, ["type": "ask", "question": .object(x)])
        h.ok(c, ["type": "ask", "question": .object(y)])  // the same millisecond
        let first = h.ok(g, ["type": "pending", "child": "c1"])
        let next = try XCTUnwrap(first["next"])
        h.ok(g, ["type": "answer", "questionId": x["id"]!, "choice": "approve"])
        XCTAssertNil(try h.store.question(try XCTUnwrap(QuestionID(x["id"]!.string!))), "forgotten")
        let second = h.ok(g, ["type": "pending", "child": "c1", "after": next])
        XCTAssertEqual(second["questions"]?.array?.map { $0["id"]?.string }, [y["id"]!.string!.uppercased()])
    }

    /// A page of a long history reads only about what it holds from the store, not every
    /// question up to its limit (each may carry an avatar of 256 KiB).
    func testAPageReadsOnlyWhatItHolds() throws {
        let store = FlakyStore()
        let h = try CoreHarness(store: store) { $0.listReplyBytes = 100_000 }
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let avatar = Data(repeating: 7, count: 20_000).base64EncodedString()
        for _ in 0..<300 {
            var q = h.question()
            q["topic"] = .object([
                "kind": "communication",
                "personInformation": [
                    .object(["handle": .object(["value": "+1 555 0100", "kind": "phoneNumber"]), "avatarImage": .string(avatar)])
                ],
            ])
            h.ok(c, ["type": "ask", "question": .object(q)])
            h.ok(c, ["type": "cancel", "questionId": q["id"]!])
        }
        let (g, _) = h.login("g1")
        store.listed.withLock { $0 = 0 }
        let page = h.ok(g, ["type": "history", "child": "c1", "limit": 300])
        XCTAssertEqual(page["questions"]?.array?.count, 3, "about 100 KB of 27 KB questions")
        XCTAssertEqual(page["more"]?.bool, true)
        XCTAssertLessThanOrEqual(store.listed.withLock { $0 }, 8, "one first chunk read, not 64 questions nor 300")
        // Small questions are read in chunks that grow: a page of 150 takes five reads.
        store.reads.withLock { $0 = 0 }
        let (c2, _) = h.login("c2")
        for _ in 0..<300 {
            let q = h.question()
            h.ok(c2, ["type": "ask", "question": .object(q)])
            h.ok(c2, ["type": "cancel", "questionId": q["id"]!])
        }
        XCTAssertEqual(h.ok(h.login("g2").0, ["type": "history", "child": "c2", "limit": 150])["questions"]?.array?.count, 150)
        XCTAssertEqual(store.reads.withLock { $0 }, 5, "chunks of 8, 16, 32, then 64")
    }

    /// A harness over `store` where c1 asked a question that g1 answered.
    private func answered(over store: FlakyStore) throws -> (CoreHarness, ConnectionID, ConnectionID, JSONObject) {
        let h = try CoreHarness(store: store)
        h.standardFamilies()
        let (c, _) = h.login("c1")
        let (g, _) = h.login("g1")
        let q = h.question()
        h.ok(c, ["type": "ask", "question": .object(q)])
        h.ok(g, ["type": "answer", "questionId": q["id"]!, "choice": "approve"])
        return (h, c, g, q)
    }

    /// A store that cannot be read gets a clear `busy`, and nothing changes.
    func testAnUnreadableStoreIsBusyNotAnAnswer() throws {
        let store = FlakyStore()
        let (h, c, g, q) = try answered(over: store)
        store.failing.withLock { $0 = true }
        let busy = h.error(c, ["type": "ask", "question": .object(q)], .busy)
        XCTAssertTrue(busy["message"]?.string?.contains("could not read question") ?? false, JSON.object(busy).text)
        _ = h.error(g, ["type": "history"], .busy)
        store.failing.withLock { $0 = false }
        XCTAssertEqual(h.ok(c, ["type": "ask", "question": .object(q)])["status"]?.string, "answered")
    }

    /// Damage on disk is no `busy`: no retry mends it, and the message says who must act.
    func testADamagedStoreIsAnInternalErrorThatNamesTheCheck() throws {
        let store = FlakyStore()
        let (h, c, g, q) = try answered(over: store)
        store.damaged.withLock { $0 = true }
        let requests: [(ConnectionID, JSONObject)] = [(c, ["type": "ask", "question": .object(q)]), (g, ["type": "history"])]
        for (conn, request) in requests {
            let damaged = h.error(conn, request, .internal)["message"]?.string ?? ""
            XCTAssertTrue(damaged.contains("store is damaged") && damaged.contains("permission-relay check"), damaged)
        }
    }
}

/// The in-memory store, whose question reads fail while `failing`, and which counts the
/// questions its lists gave.
final class FlakyStore: RelayStore {
    let inner = MemoryStore()
    let failing = Mutex(false)
    let listed = Mutex(0)
    /// Calls of `questions(of:…)`.
    let reads = Mutex(0)

    /// Its reads fail as on a damaged disk.
    let damaged = Mutex(false)
    struct Damage: StoreReadError, CustomStringConvertible {
        var isDamaged: Bool { true }
        var description: String { "database disk image is malformed" }
    }

    private func check() throws {
        if damaged.withLock({ $0 }) { throw Damage() }
        if failing.withLock({ $0 }) { throw StoreError("disk I/O error") }
    }

    func load() throws -> StoreSnapshot { try inner.load() }
    func commit(_ changes: [Change]) throws { try inner.commit(changes) }
    func events(member: String, after seq: Int64, limit: Int, maxBytes: Int) throws -> [EventRecord] {
        try inner.events(member: member, after: seq, limit: limit, maxBytes: maxBytes)
    }
    var eventPosition: Int64 { inner.eventPosition }
    func prune(olderThan cutoff: Timestamp, acknowledged: [String: Int64], settledThrough: Int64, limit: Int) throws -> PruneStep {
        try inner.prune(olderThan: cutoff, acknowledged: acknowledged, settledThrough: settledThrough, limit: limit)
    }
    func updateQuestionLookups() throws -> Bool { false }
    func forgetQuestions(keeping limits: QuestionsKept, limit: Int) throws -> Bool {
        try inner.forgetQuestions(keeping: limits, limit: limit)
    }
    func question(_ id: QuestionID) throws -> QuestionRecord? {
        try check()
        return try inner.question(id)
    }
    func questions(of child: String, status: QuestionStatus?, newestFirst: Bool, after: QuestionPlace?, limit: Int) throws
        -> [QuestionRecord]
    {
        try check()
        let page = try inner.questions(of: child, status: status, newestFirst: newestFirst, after: after, limit: limit)
        listed.withLock { $0 += page.count }
        reads.withLock { $0 += 1 }
        return page
    }
}
